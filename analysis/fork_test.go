package analysis

import (
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cudatrace/cudatrace/tracer"
)

// forkTrace: python3[10] loads libcuda and cuInit succeeds; then process 11
// appears, which made no exec and opened no library, and does what child
// adds.
func forkTrace(child func(add func(tracer.Event))) []tracer.Event {
	b := newEvents(10, "python3")
	b.add(tracer.Event{Kind: tracer.KindExec, Path: "/usr/bin/python3"})
	b.open("/usr/lib/x86_64-linux-gnu/libcuda.so.1", unix.O_RDONLY|unix.O_CLOEXEC, 3, nil)
	b.open("/dev/nvidiactl", unix.O_RDWR, 4, dev(195, 255))
	b.add(tracer.Event{Kind: tracer.KindAPI, Func: "cuInit", Path: "/usr/lib/x86_64-linux-gnu/libcuda.so.1"})
	child(func(e tracer.Event) {
		b.seq++
		e.Seq, e.PID, e.TID, e.Comm = b.seq, 11, 11, "pt_worker"
		b.evs = append(b.evs, e)
	})
	return b.evs
}

func TestForkAfterInit(t *testing.T) {
	cases := []struct {
		name     string
		child    func(add func(tracer.Event))
		want     bool
		inferred bool
		verdict  string
	}{
		{"child's CUDA call gets 3", func(add func(tracer.Event)) {
			add(tracer.Event{Kind: tracer.KindAPI, Func: "cuDeviceGetCount", Ret: 3, Path: "/usr/lib/x86_64-linux-gnu/libcuda.so.1"})
			add(tracer.Event{Kind: tracer.KindExit, ExitCode: 1})
		}, true, false, "cuDeviceGetCount returned 3 (CUDA_ERROR_NOT_INITIALIZED) in pt_worker[11]"},
		{"torch refuses without calling CUDA", func(add func(tracer.Event)) {
			add(tracer.Event{Kind: tracer.KindExit, ExitCode: 1})
		}, true, true, "cuInit succeeded in python3[10], but pt_worker[11] was forked from python3[10]"},
		{"child exits 0", func(add func(tracer.Event)) {
			add(tracer.Event{Kind: tracer.KindExit})
		}, false, false, "no NVIDIA device call failed"},
		{"child that execs its own program", func(add func(tracer.Event)) {
			add(tracer.Event{Kind: tracer.KindExec, Path: "/usr/bin/python3"})
			add(tracer.Event{Kind: tracer.KindAPI, Func: "cuInit", Ret: 3, Path: "/usr/lib/x86_64-linux-gnu/libcuda.so.1"})
		}, false, false, "cuInit returned 3"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// A state where a lone cuInit 3 gets the HMM hint: a fork's must not.
			s := driverSnap()
			s.DriverState.KernelConfig["CONFIG_HMM_MIRROR"] = "y"
			a := AnalyzeFacts(forkTrace(c.child), s, Facts{APIReturns: true})
			if has(a, "cuda-fork-after-init") != c.want {
				t.Fatalf("findings %v; verdict %q", ids(a), a.Verdict)
			}
			mustContain(t, "verdict", a.Verdict, c.verdict)
			if !c.want {
				return
			}
			f := find(t, a, "cuda-fork-after-init")
			if f.Severity != SeverityError || f.Inferred != c.inferred {
				t.Errorf("severity %s inferred %v", f.Severity, f.Inferred)
			}
			mustContain(t, "fix", f.Fix, "spawn", "forkserver", "in the children")
			mustContain(t, "detail", detail(f), "python3[10]", "fork")
			for _, x := range a.Findings {
				if x.ID == "cuda-failed-unexplained" || strings.Contains(detail(x)+x.Summary, "GSP") || strings.Contains(detail(x), "HMM") {
					t.Errorf("finding %s gives the driver hint for a fork: %s", x.ID, x.Summary)
				}
			}
		})
	}
}
