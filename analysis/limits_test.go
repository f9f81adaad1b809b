package analysis

import (
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cudatrace/cudatrace/snapshot"
	"github.com/cudatrace/cudatrace/tracer"
)

// Every device call fine, CUDA fails: an address-space limit explains 2,
// an fd limit reached by fds that are not NVIDIA opens explains 304/46;
// without the limit neither is claimed.
func TestLimitsExplainCUDA(t *testing.T) {
	run := func(s *snapshot.Snapshot, fn string, code int64) Result {
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

// A traced call a limit failed names the limit: mmap's ENOMEM in
// rlimit-as, an eventfd's EMFILE in fd-limit (no longer inferred, whatever
// the snapshot's fd count), ENFILE as the system's table; one of another
// process, or after CUDA failed, is not the cause.
func TestLimitFailureNamed(t *testing.T) {
	run := func(s *snapshot.Snapshot, code int64, limit ...tracer.Event) Result {
		b := newEvents(9, "python3")
		b.open("/dev/nvidiactl", unix.O_RDWR, 3, dev(195, 255))
		for _, e := range limit {
			if e.PID == 0 {
				b.add(e)
			} else {
				b.seq++
				e.Seq = b.seq
				b.evs = append(b.evs, e)
			}
		}
		fn := "cuDevicePrimaryCtxRetain"
		if code == 2 {
			fn = "cuInit"
		}
		b.add(tracer.Event{Kind: tracer.KindAPI, Func: fn, Ret: code})
		return AnalyzeFacts(b.evs, s, Facts{APIReturns: true})
	}
	mmap := tracer.Event{Kind: tracer.KindLimit, Syscall: "mmap", Ret: -int64(unix.ENOMEM)}
	s := h200()
	s.Process.AS = &[2]uint64{1 << 30, ^uint64(0)}
	f := find(t, run(s, 2, mmap), "rlimit-as")
	mustContain(t, "detail", detail(f), "`mmap()` by python3[9] → ENOMEM")
	if len(f.Events) != 2 {
		t.Errorf("rlimit-as events %v, want the mmap's and cuInit's", f.Events)
	}
	if f = find(t, run(s, 2), "rlimit-as"); strings.Contains(detail(f), "mmap()") {
		t.Errorf("no mmap traced, yet named:\n%s", detail(f))
	}

	// Far from the limit at the snapshot: only the traced call shows it.
	s = h200()
	s.Process.NoFile, s.Process.OpenFDs = &[2]uint64{64, 64}, 10
	eventfd := tracer.Event{Kind: tracer.KindLimit, Syscall: "eventfd2", Ret: -int64(unix.EMFILE)}
	a := run(s, 304, eventfd)
	f = find(t, a, "fd-limit")
	if f.Inferred {
		t.Error("fd-limit from a traced EMFILE: not inferred")
	}
	mustContain(t, "summary", f.Summary, "eventfd2 failed with EMFILE", "RLIMIT_NOFILE 64")
	mustContain(t, "detail", detail(f), "`eventfd2()` by python3[9] → EMFILE", "10 fds")
	if has(a, "cuda-failed-unexplained") {
		t.Errorf("findings %v: the EMFILE explains it", ids(a))
	}

	pipe := tracer.Event{Kind: tracer.KindLimit, Syscall: "pipe2", Ret: -int64(unix.ENFILE)}
	f = find(t, run(s, 46, pipe), "fd-limit")
	mustContain(t, "summary", f.Summary, "pipe2 failed with ENFILE", "system's open-file table")
	mustContain(t, "fix", f.Fix, "fs.file-max")

	// Another process's EMFILE is not this one's.
	other := eventfd
	other.PID, other.Comm = 77, "other"
	if a = run(s, 304, other); has(a, "fd-limit") {
		t.Errorf("another process's EMFILE explains it: %v", ids(a))
	}
	// An ENOMEM is not an fd's.
	if a = run(s, 304, mmap); has(a, "fd-limit") {
		t.Errorf("mmap's ENOMEM read as an fd limit: %v", ids(a))
	}
}

// Without CUDA's return code (an strace log): a call a limit failed after
// the process used the driver explains a process that then failed, as an
// inferred error that heads the verdict; one that exited 0 gets a warning
// only; a limit failure before any driver use, or none, explains nothing.
func TestLimitsExplainWithoutCUDACode(t *testing.T) {
	run := func(limit tracer.Event, code int, driverFirst bool) Result {
		b := newEvents(9, "python3")
		if !driverFirst {
			b.add(limit)
		}
		b.open("/usr/lib/x86_64-linux-gnu/libcuda.so.1", unix.O_RDONLY|unix.O_CLOEXEC, 3, nil)
		b.open("/dev/nvidiactl", unix.O_RDWR, 4, dev(195, 255))
		if driverFirst {
			b.add(limit)
		}
		b.add(tracer.Event{Kind: tracer.KindExit, ExitCode: code})
		return Analyze(b.evs, h200())
	}
	eventfd := tracer.Event{Kind: tracer.KindLimit, Syscall: "eventfd2", Ret: -int64(unix.EMFILE)}
	a := run(eventfd, 1, true)
	f := find(t, a, "fd-limit")
	if f.Severity != SeverityError || !f.Inferred {
		t.Errorf("fd-limit %+v, want an inferred error", f)
	}
	mustContain(t, "verdict", a.Verdict, "eventfd2 failed with EMFILE in python3[9]")
	mustContain(t, "detail", detail(f), "exited 1", "not traced")
	mustContain(t, "fix", f.Fix, "ulimit -n")

	if f := find(t, run(eventfd, 0, true), "fd-limit"); f.Severity != SeverityWarning {
		t.Errorf("exit 0: fd-limit severity %s, want warning", f.Severity)
	}
	enfile := eventfd
	enfile.Ret = -int64(unix.ENFILE)
	mustContain(t, "fix", find(t, run(enfile, 1, true), "fd-limit").Fix, "fs.file-max")

	mmap := tracer.Event{Kind: tracer.KindLimit, Syscall: "mmap", Ret: -int64(unix.ENOMEM)}
	a = run(mmap, 1, true)
	f = find(t, a, "rlimit-as")
	mustContain(t, "summary", f.Summary, "mmap failed with ENOMEM")
	mustContain(t, "fix", f.Fix, "ulimit -v unlimited", "overcommit")

	if a := run(eventfd, 1, false); has(a, "fd-limit") {
		t.Errorf("a limit failure before the driver was used: findings %v", ids(a))
	}
}

// RLIMIT_MEMLOCK is never offered as the cause or the fix: the driver pins
// CUDA's host memory uncharged to it (measured on the H200: pinned and
// registered memory at `ulimit -l 0`). A device call that fails ENOMEM is
// the kernel's memory, and NV_ERR_NO_MEMORY the GPU's or the host's.
func TestMemlockNeverBlamed(t *testing.T) {
	b := newEvents(9, "python3")
	b.open("/dev/nvidiactl", unix.O_RDWR, 3, dev(195, 255))
	b.open("/dev/nvidia-uvm", unix.O_RDWR|unix.O_CLOEXEC, -int64(unix.ENOMEM), nil)
	s := h200()
	s.Process.MemLock = &[2]uint64{0, 0}
	a := Analyze(b.evs, s)
	f := find(t, a, "kernel-no-memory")
	if strings.Contains(f.Fix, "ulimit -l") || strings.Contains(f.Fix, "MEMLOCK") {
		t.Errorf("fix %q offers RLIMIT_MEMLOCK", f.Fix)
	}
	mustContain(t, "detail", detail(f), "RLIMIT_MEMLOCK is not the cause")
}
