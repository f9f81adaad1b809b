package watch

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/cudatrace/cudatrace/analysis"
	"github.com/cudatrace/cudatrace/report"
)

// Line is one diagnosis as printed on stdout. Its keys are fixed:
// deploy/ documents queries over them (docs/watch.md).
type Line struct {
	Time     time.Time `json:"time"` // RFC 3339 with nanoseconds, UTC
	Host     string    `json:"host"`
	ReportID string    `json:"report_id"`
	PID      int       `json:"pid"`
	Comm     string    `json:"comm"`
	Argv     []string  `json:"argv"`
	// ArgvCut: argv is only what the exec event copied (the first few
	// arguments, each cut to 63 bytes): the process was gone before its
	// whole argv could be read from /proc.
	ArgvCut     bool      `json:"argv_cut,omitempty"`
	UID         int64     `json:"uid"` // -1 when unknown
	User        string    `json:"user"`
	Cgroup      string    `json:"cgroup"`
	Runtime     string    `json:"runtime"` // as snapshot.Container names it; "" outside one
	ContainerID string    `json:"container_id"`
	PodUID      string    `json:"pod_uid"`
	CUDA        *LineCUDA `json:"cuda,omitempty"` // when a CUDA/NVML return code was seen
	Verdict     string    `json:"verdict"`
	Cause       string    `json:"cause"` // the primary finding's ID; "" when nothing is wrong (-v)
	Findings    []string  `json:"findings"`
	Fix         string    `json:"fix"`
	Report      string    `json:"report,omitempty"` // the kept report's path (--report-dir)
	Incomplete  bool      `json:"incomplete"`       // events were lost while the process ran
}

// LineCUDA is what CUDA or NVML returned.
type LineCUDA struct {
	Func string `json:"func"`
	Code int64  `json:"code"`
	Name string `json:"name"`
}

// newLine summarises p's report. Cause is set only when the analysis says
// something went wrong: CUDA failed, a failing call was found, or an error
// finding where the process made an NVIDIA device call; the primary finding is the first (the analysis orders them
// worst first) that is not information.
func newLine(host string, p *proc, rep *report.Report, now time.Time) Line {
	a := rep.Analysis
	l := Line{
		Time: now.UTC(), Host: host, ReportID: newReportID(now, p.pid), PID: p.pid,
		Comm: p.comm, Argv: p.argv, ArgvCut: p.argvCut, UID: p.id.UID, Cgroup: p.id.Cgroup,
		Runtime: p.container.Runtime, ContainerID: p.container.ID, PodUID: p.container.PodUID,
		Verdict: a.Verdict, Findings: []string{},
		Incomplete: !rep.Trace.Complete || rep.Trace.Dropped > 0,
	}
	if l.Argv == nil {
		l.Argv = []string{}
	}
	if s := rep.Snapshot; s != nil {
		// Read while it ran; of one gone, only the user name its UID
		// (read at its first event) has where its root was cudatrace's.
		if s.Process.Comm != "" || s.Process.User != "" {
			l.UID, l.User = int64(s.Process.UID), s.Process.User
		}
		// Where it was when it failed: the first event's reading may
		// predate a move into the job's cgroup (a runtime or a wrapper
		// moves the process after it starts).
		if cg := s.CgroupV2; cg != nil && cg.Path != "" && cg.QueryError == "" {
			l.Cgroup = cg.Path
		}
		// The snapshot's reading (init's container=, ancestors) is the
		// better one; the path's IDs stay when it names none.
		if s.Container.Runtime != "" {
			l.Runtime = s.Container.Runtime
		}
		if l.ContainerID == "" {
			l.ContainerID = s.Container.ID
		}
		if l.PodUID == "" {
			l.PodUID = s.Container.PodUID
		}
	}
	if c := a.CUDA; c != nil && c.Func != "" && (c.Status == "failed" || c.Status == "ok") {
		l.CUDA = &LineCUDA{Func: c.Func, Code: c.Code, Name: c.Name}
	}
	wrong := a.Failing != nil || (a.CUDA != nil && a.CUDA.Status == "failed")
	// An error about the host (the driver not loaded) is no failure of a
	// process that made no device call: the verdict says "beware".
	touched := analysis.MadeDeviceCall(rep.Events)
	var primary *analysis.Finding
	for i := range a.Findings {
		f := &a.Findings[i]
		l.Findings = append(l.Findings, f.ID)
		if f.Severity == analysis.SeverityError && touched {
			wrong = true
		}
		if primary == nil && f.Severity != analysis.SeverityInfo {
			primary = f
		}
	}
	if wrong {
		if primary == nil && len(a.Findings) > 0 {
			primary = &a.Findings[0]
		}
		if primary != nil {
			l.Cause, l.Fix = primary.ID, primary.Fix
		} else {
			l.Cause = "unexplained" // never reached: a failure always has a finding
		}
	}
	return l
}

// newReportID names a diagnosis: sortable by time (--report-keep removes
// the oldest by name), unique by PID and a random part.
func newReportID(t time.Time, pid int) string {
	var r [4]byte
	_, _ = rand.Read(r[:]) // crypto/rand.Read never fails
	return t.UTC().Format("20060102T150405.000Z") + "-" + strconv.Itoa(pid) + "-" + hex.EncodeToString(r[:])
}

// writeLine prints l: one JSON object, or one readable line where every
// string the target chose is escaped.
func writeLine(w io.Writer, l Line, asJSON bool) error {
	if asJSON {
		b, err := json.Marshal(l)
		if err != nil {
			return err
		}
		_, err = w.Write(append(b, '\n'))
		return err
	}
	_, err := io.WriteString(w, readable(l)+"\n")
	return err
}

// readable is l for a terminal: time, process, where it runs, cause and
// verdict, the fix's first line.
func readable(l Line) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s[%d]", l.Time.Local().Format("15:04:05"), analysis.Printable(l.Comm), l.PID)
	if l.User != "" {
		fmt.Fprintf(&b, " user %s", analysis.Printable(l.User))
	}
	switch {
	case l.PodUID != "":
		fmt.Fprintf(&b, " pod %s", analysis.Printable(l.PodUID))
	case l.ContainerID != "":
		fmt.Fprintf(&b, " %s %s", analysis.Printable(l.Runtime), analysis.Printable(short(l.ContainerID)))
	case l.Cgroup != "":
		fmt.Fprintf(&b, " cgroup %s", analysis.Printable(l.Cgroup))
	}
	if l.Cause == "" {
		fmt.Fprintf(&b, ": ok: %s", analysis.Printable(l.Verdict))
		return b.String()
	}
	fmt.Fprintf(&b, ": [%s] %s", analysis.Printable(l.Cause), analysis.Printable(l.Verdict))
	if fix, _, _ := strings.Cut(l.Fix, "\n"); fix != "" {
		fmt.Fprintf(&b, " Fix: %s", analysis.Printable(fix))
	}
	if l.Incomplete {
		b.WriteString(" (incomplete: events were lost)")
	}
	if l.Report != "" {
		fmt.Fprintf(&b, " (%s)", analysis.Printable(l.Report))
	}
	return b.String()
}

func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
