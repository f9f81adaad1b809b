package render

import (
	"fmt"
	"slices"
	"strings"

	"github.com/cudatrace/cudatrace/diagnose/record"
	"github.com/cudatrace/cudatrace/report"
	"github.com/cudatrace/cudatrace/tracer"
)

// SummaryRow is one line of the -c summary, as strace -c has one per
// system call: one node (or library entry point) and one call, with how
// many times it was made and how many of those failed, by error.
type SummaryRow struct {
	Node   string
	Call   string
	Calls  uint64
	Errors uint64
	ByErr  map[string]uint64 // errno name (CUDA/NVML: the return code) → failures
}

// SummaryRows counts the report's calls per node and call, the rows of the
// -c table. The counts are the trace's exact ones: stored events, plus
// what the ioctl and folded summaries count beyond them. Execs and exits are not NVIDIA calls and
// are left out.
func SummaryRows(rep *report.Report) []SummaryRow {
	type key struct{ node, call string }
	rows := map[key]*SummaryRow{}
	row := func(node, call string) *SummaryRow {
		k := key{node, call}
		if rows[k] == nil {
			rows[k] = &SummaryRow{Node: node, Call: call, ByErr: map[string]uint64{}}
		}
		return rows[k]
	}
	// A device's name: the path an open of it returned, else MAJ:MIN.
	names := map[tracer.Dev]string{}
	for i := range rep.Events {
		if e := &rep.Events[i]; e.Dev != nil && e.Path != "" && e.Kind != tracer.KindIoctl {
			if _, ok := names[*e.Dev]; !ok {
				names[*e.Dev] = e.Path
			}
		}
	}
	devName := func(d tracer.Dev) string {
		if n, ok := names[d]; ok {
			return n
		}
		return "char " + d.String()
	}
	stored := map[record.Site]uint64{}
	callOf := map[record.Site]string{} // the syscall a folded site's stored calls name
	ioctlErrs := map[tracer.Dev]map[string]uint64{}
	for i := range rep.Events {
		e := &rep.Events[i]
		k, ok := record.SiteOf(e)
		if !ok {
			continue
		}
		if e.Kind == tracer.KindIoctl {
			// Counted from the exact ioctl summaries below; the stored
			// ones say which errors.
			if e.Failed() && e.Dev != nil {
				if ioctlErrs[*e.Dev] == nil {
					ioctlErrs[*e.Dev] = map[string]uint64{}
				}
				ioctlErrs[*e.Dev][e.ErrnoName()] = 1 // which, not how many: the count is the summary's
			}
			continue
		}
		stored[k]++
		callOf[k] = e.Syscall
		node, call := e.Path, e.Syscall
		if e.Kind == tracer.KindAPI {
			node, call = "(library)", e.Func
		}
		r := row(node, call)
		r.Calls++
		switch {
		case e.APIFailed():
			r.Errors++
			r.ByErr[fmt.Sprintf("%d", e.Ret)]++
		case e.Kind != tracer.KindAPI && e.Failed():
			r.Errors++
			r.ByErr[e.ErrnoName()]++
		}
	}
	for i := range rep.Folded {
		f := &rep.Folded[i]
		if f.Kind == tracer.KindIoctl {
			continue // in Ioctls
		}
		k := f.Site()
		more := f.Calls - min(f.Calls, stored[k])
		if more == 0 {
			continue
		}
		node, call := f.Path, callOf[k]
		if call == "" {
			call = string(f.Kind)
		}
		if f.Kind == tracer.KindAPI {
			node, call = "(library)", f.Path
		}
		r := row(node, call)
		r.Calls += more
		if f.Errno != 0 {
			r.Errors += more
			if f.Kind == tracer.KindAPI {
				r.ByErr[fmt.Sprintf("%d", f.Errno)] += more
			} else {
				e := tracer.Event{Kind: f.Kind, Ret: -int64(f.Errno)}
				r.ByErr[e.ErrnoName()] += more
			}
		}
	}
	for _, s := range rep.Ioctls {
		r := row(devName(s.Dev), "ioctl")
		r.Calls += s.Count
		r.Errors += min(s.Failed, s.Count)
	}
	for d, errs := range ioctlErrs {
		r := row(devName(d), "ioctl")
		for name, n := range errs {
			r.ByErr[name] += n
		}
	}
	out := make([]SummaryRow, 0, len(rows))
	for _, r := range rows {
		out = append(out, *r)
	}
	slices.SortFunc(out, func(a, b SummaryRow) int {
		if c := strings.Compare(a.Node, b.Node); c != 0 {
			return c
		}
		return strings.Compare(a.Call, b.Call)
	})
	return out
}
