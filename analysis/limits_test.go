package analysis

import (
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cudatrace/cudatrace/snapshot"
	"github.com/cudatrace/cudatrace/tracer"
)

// Every device call fine, CUDA fails: an address-space limit explains 2,
// an fd limit reached by fds that are not NVIDIA opens explains 304/46;
// without the limit neither is claimed.
func TestLimitsExplainCUDA(t *testing.T) {
	run := func(s *snapshot.Snapshot, fn string, code int64) Analysis {
		b := newEvents(9, "python3")
		b.open("/dev/nvidiactl", unix.O_RDWR, 3, dev(195, 255))
		b.open("/dev/nvidia-uvm", unix.O_RDWR|unix.O_CLOEXEC, 4, dev(238, 0))
		b.add(tracer.Event{Kind: tracer.KindAPI, Func: "cuInit"})
		b.add(tracer.Event{Kind: tracer.KindAPI, Func: fn, Ret: code})
		return AnalyzeFacts(b.evs, s, Facts{APIReturns: true})
	}
	s := h200()
	s.Process.AS = &[2]uint64{4 << 30, ^uint64(0)}
	a := run(s, "cuInit", 2)
	f := find(t, a, "rlimit-as")
	mustContain(t, "detail", detail(f), "4 GiB", "ulimit -v")
	mustContain(t, "fix", f.Fix, "ulimit -v unlimited", "LimitAS=")
	mustContain(t, "verdict", a.Verdict, "returned 2", "RLIMIT_AS is 4 GiB")
	mustContain(t, "detail", detail(f), "at the failure")
	s.Process.LimitsAtExec = true
	mustContain(t, "detail", detail(find(t, run(s, "cuInit", 2), "rlimit-as")), "at its last exec")

	s = h200()
	s.Process.NoFile, s.Process.OpenFDs = &[2]uint64{64, 64}, 60
	a = run(s, "cuDevicePrimaryCtxRetain", 304)
	f = find(t, a, "fd-limit")
	if !f.Inferred {
		t.Error("fd-limit from the snapshot's count: inferred")
	}
	mustContain(t, "detail", detail(f), "eventfd", "60 fds")

	s = h200()
	s.Process.AS = &[2]uint64{^uint64(0), ^uint64(0)}
	s.Process.NoFile, s.Process.OpenFDs = &[2]uint64{1 << 20, 1 << 20}, 40
	for _, c := range []struct {
		fn   string
		code int64
	}{{"cuInit", 2}, {"cuDevicePrimaryCtxRetain", 304}} {
		a = run(s, c.fn, c.code)
		if has(a, "rlimit-as") || has(a, "fd-limit") || !has(a, "cuda-failed-unexplained") {
			t.Errorf("%s %d without a limit: findings %v", c.fn, c.code, ids(a))
		}
	}
}

// The limits the kernel recorded at the failing return decide over what
// /proc showed at the exec: a limit lowered after it (prlimit, setrlimit)
// is the one CUDA met.
func TestLimitsRecordedAtTheReturn(t *testing.T) {
	s := h200()
	s.Process.AS = &[2]uint64{^uint64(0), ^uint64(0)}
	s.Process.LimitsAtExec = true
	b := newEvents(7, "python3")
	b.open("/dev/nvidiactl", unix.O_RDWR, 3, dev(195, 255))
	b.add(tracer.Event{Kind: tracer.KindAPI, Func: "cuInit", Ret: 2, Limits: &tracer.Limits{AS: [2]uint64{4 << 30, ^uint64(0)}}})
	a := Analyze(b.evs, s)
	f := find(t, a, "rlimit-as")
	mustContain(t, "detail", detail(f), "4 GiB (soft) / unlimited (hard)", "read in the kernel as cuInit returned")
	// Without the kernel's record: /proc's, said to be the exec's.
	b.evs[len(b.evs)-1].Limits = nil
	s.Process.AS = &[2]uint64{4 << 30, ^uint64(0)}
	mustContain(t, "detail", detail(find(t, Analyze(b.evs, s), "rlimit-as")), "at its last exec")
}
