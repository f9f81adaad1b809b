package ebpf

import (
	"fmt"
	"os"
	"slices"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cudatrace/cudatrace/internal/fakelimits"
	"github.com/cudatrace/cudatrace/internal/privtest"
	"github.com/cudatrace/cudatrace/tracer"
)

// The fd and address-space calls a limit fails arrive, as the call and its
// errno; the successful ones do not; repeats fold per (call, errno).
func TestLimitCalls(t *testing.T) {
	privtest.RequireRoot(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	want := fakelimits.Want
	for _, fold := range []bool{false, true} {
		t.Run(fmt.Sprintf("fold=%v", fold), func(t *testing.T) {
			spec := tracer.Spec{Argv: []string{self, helperArg, "limits", "-"}}
			const after = 2
			if fold {
				spec.FoldCallsAfter = after
			}
			res, rec := runHelper(t, spec)
			count := map[string]int{}
			pids := map[int]bool{}
			for _, e := range rec.find(func(e *tracer.Event) bool { return e.Kind == tracer.KindLimit }) {
				pids[e.PID] = true
				if e.PID == 0 || e.TID == 0 || e.Comm == "" || e.Path != "" || e.Seq == 0 {
					t.Errorf("event %+v", e)
				}
				count[e.Syscall+" "+e.ErrnoName()]++
			}
			sent := fakelimits.Rounds
			if fold {
				sent = after
			}
			var got []string
			for site, n := range count {
				got = append(got, site)
				if n != sent {
					t.Errorf("%s sent %d times, want %d", site, n, sent)
				}
			}
			slices.Sort(got)
			if len(pids) != 1 {
				t.Errorf("limit failures from processes %v, want the helper alone", pids)
			}
			if !slices.Equal(got, want) {
				t.Errorf("limit failures %v, want %v", got, want)
			}
			var folded []string
			for _, f := range res.Folded {
				if f.Kind != tracer.KindLimit {
					continue
				}
				folded = append(folded, f.Path+" "+unix.ErrnoName(syscall.Errno(f.Errno)))
				if f.Count != fakelimits.Rounds-after {
					t.Errorf("%s folded %d, want %d", f.Path, f.Count, fakelimits.Rounds-after)
				}
			}
			slices.Sort(folded)
			if fold && !slices.Equal(folded, want) || !fold && len(folded) != 0 {
				t.Errorf("folded %v", folded)
			}
		})
	}
}
