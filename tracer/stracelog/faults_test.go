package stracelog

import (
	"path/filepath"
	"syscall"
	"testing"

	"github.com/cudatrace/cudatrace/analysis"
	"github.com/cudatrace/cudatrace/tracer"
)

// The logs in testdata/strace/faults are real strace 6.1 output of
// fakecuda in internal/scenario environments (stand-in nodes: nvidiactl is
// c 1:7, nvidia-uvm c 7:0), recorded by testdata/strace/gen/faults.sh.
const faultLogs = "../../testdata/strace/faults"

// theExec is the pid that exec'd fakecuda (the traced helper set the faults
// up in the same process first).
func theExec(t *testing.T, lg *Log) int {
	t.Helper()
	for _, e := range find(lg, func(e *tracer.Event) bool { return e.Kind == tracer.KindExec && e.Ret == 0 }) {
		if filepath.Base(e.Path) == "fakecuda" {
			return e.PID
		}
	}
	t.Fatal("no execve of fakecuda")
	return 0
}

func failedWith(evs []*tracer.Event, errno syscall.Errno) []*tracer.Event {
	var out []*tracer.Event
	for _, e := range evs {
		if e.Errno() == errno {
			out = append(out, e)
		}
	}
	return out
}

// -X verbose (raw values, decodings in comments) and -X raw (numbers only)
// give the events the default format gives: the uvm opens with their
// flags and EPERM, and stat's device number.
func TestVerboseAndRawLogs(t *testing.T) {
	for _, name := range []string{"xverbose-deny-uvm", "xraw-deny-uvm"} {
		t.Run(name, func(t *testing.T) {
			lg := parseFile(t, filepath.Join(faultLogs, name+".strace"))
			checkStream(t, lg)
			pid := theExec(t, lg)
			uvm := opensOf(lg, "/dev/nvidia-uvm")
			if len(uvm) != 2 {
				t.Fatalf("want 2 opens of /dev/nvidia-uvm, got %d", len(uvm))
			}
			for i, flags := range []uint64{0x2 | 0x80000, 0x2} {
				if e := uvm[i]; e.Errno() != syscall.EPERM || e.Flags != flags || e.PID != pid || e.Comm != "fakecuda" {
					t.Errorf("uvm open %d: %+v", i, e)
				}
			}
			stats := find(lg, func(e *tracer.Event) bool {
				return e.Kind == tracer.KindStat && e.Path == "/dev/nvidiactl" && e.Ret == 0
			})
			if len(stats) == 0 || !sameDev(stats[0].Dev, dev(1, 7)) || stats[0].Mode != 0o20666 {
				t.Fatalf("stat of nvidiactl: %+v", stats)
			}
			// fakecuda's teardown after the failed open, and nvidiactl's fd.
			if len(find(lg, func(e *tracer.Event) bool { return e.Kind == tracer.KindIoctl && e.FD == -1 && e.Request == 0x30000002 })) != 1 {
				t.Error("no ioctl(-1, UVM_DEINITIALIZE)")
			}
			if n := len(ioctlsOn(lg, "/dev/nvidiactl")); n != 7 {
				t.Errorf("%d ioctls on nvidiactl, want 7 (5 before uvm, 2 RM_FREE after)", n)
			}
			if lg.Skipped != 0 {
				t.Errorf("%d lines skipped", lg.Skipped)
			}
		})
	}
}

// strace -p to stderr: the log starts mid-process, with "Process N
// attached" and [pid N] prefixes, and no execve. The calls of every later
// cuInit are still there, from the process strace attached to.
func TestAttachLog(t *testing.T) {
	lg := parseFile(t, filepath.Join(faultLogs, "attach-deny-uvm.strace"))
	checkStream(t, lg)
	const pid = 30531 // strace: Process 30531 attached with 5 threads
	if !lg.HasPIDs || !lg.HasTimes {
		t.Errorf("HasPIDs %v HasTimes %v, want both", lg.HasPIDs, lg.HasTimes)
	}
	if n := len(find(lg, func(e *tracer.Event) bool { return e.Kind == tracer.KindExec })); n != 0 {
		t.Errorf("%d exec events in an attach log", n)
	}
	uvm := failedWith(opensOf(lg, "/dev/nvidia-uvm"), syscall.EPERM)
	if len(uvm) < 2 || len(uvm)%2 != 0 {
		t.Fatalf("%d failed uvm opens, want pairs (open, retry) of whole cuInits", len(uvm))
	}
	for _, e := range uvm {
		if e.PID != pid {
			t.Errorf("uvm open by pid %d, want %d: %+v", e.PID, pid, e)
		}
	}
	// The nvidiactl fd of each whole cuInit is known from its open, so its
	// ioctls are kept even without -y.
	if len(ioctlsOn(lg, "/dev/nvidiactl")) == 0 {
		t.Error("no ioctl on nvidiactl")
	}
}

// A seccomp filter installed inside the logged tree is an event, by the
// pid that then runs fakecuda, before the calls it refuses; and the refused
// call is in the stream as the driver's error would be.
func TestSeccompLogs(t *testing.T) {
	cases := []struct {
		file    string
		syscall string
		flags   uint64
		refused func(lg *Log) []*tracer.Event
		errno   syscall.Errno
	}{
		{"seccomp-ioctl", "seccomp", 0, func(lg *Log) []*tracer.Event { return ioctlsOn(lg, "/dev/nvidiactl") }, syscall.EPERM},
		{"seccomp-notify-ioctl", "seccomp", 8, func(lg *Log) []*tracer.Event { return ioctlsOn(lg, "/dev/nvidiactl") }, syscall.EPERM},
		{"seccomp-prctl-nvidia-ioctl", "prctl", 0, func(lg *Log) []*tracer.Event { return ioctlsOn(lg, "/dev/nvidiactl") }, syscall.EPERM},
		{"seccomp-openat", "seccomp", 0, func(lg *Log) []*tracer.Event { return opensOf(lg, "/dev/nvidiactl") }, syscall.EPERM},
		{"seccomp-memfd", "seccomp", 0, func(lg *Log) []*tracer.Event {
			return find(lg, func(e *tracer.Event) bool { return e.Kind == tracer.KindMemfd })
		}, syscall.EPERM},
	}
	for _, tc := range cases {
		t.Run(tc.file, func(t *testing.T) {
			lg := parseFile(t, filepath.Join(faultLogs, tc.file+".strace"))
			checkStream(t, lg)
			pid := theExec(t, lg)
			filters := find(lg, func(e *tracer.Event) bool { return e.Kind == tracer.KindSeccomp })
			if len(filters) != 1 {
				t.Fatalf("%d seccomp events, want 1", len(filters))
			}
			f := filters[0]
			if f.PID != pid || f.Syscall != tc.syscall || f.Mode != 2 || f.Flags != tc.flags || f.Ret < 0 || f.Time == 0 {
				t.Errorf("filter event %+v: want %s by %d, mode 2, flags %#x", f, tc.syscall, pid, tc.flags)
			}
			if tc.flags == 8 && f.Ret <= 2 {
				t.Errorf("NEW_LISTENER returns the listener fd, got %d", f.Ret)
			}
			refused := tc.refused(lg)
			if len(refused) == 0 || refused[0].Errno() != tc.errno {
				t.Fatalf("first refused call: %+v, want %v", refused, tc.errno)
			}
			r := refused[0]
			if r.Seq <= f.Seq || r.PID != pid {
				t.Errorf("refused call %+v is not after the filter %+v in the same process", r, f)
			}
			if r.Kind == tracer.KindIoctl && (r.Request != 0xc00846d6 || r.FD < 0) {
				t.Errorf("refused ioctl %+v: want fakecuda's first, 0xc00846d6, on nvidiactl's fd", r)
			}
			if idx, same := analysis.SeccompFilterBefore(lg.Events, int(r.Seq-1)); idx != int(f.Seq-1) || !same {
				t.Errorf("SeccompFilterBefore = %d, %v; want %d, true", idx, same, f.Seq-1)
			}
		})
	}
	// Attached after the filter was in place: no filter event, the EPERM
	// ioctls on nvidiactl are still there.
	lg := parseFile(t, filepath.Join(faultLogs, "attach-seccomp-ioctl.strace"))
	if n := len(find(lg, func(e *tracer.Event) bool { return e.Kind == tracer.KindSeccomp })); n != 0 {
		t.Errorf("%d seccomp events in a log attached after the filter", n)
	}
	if len(failedWith(ioctlsOn(lg, "/dev/nvidiactl"), syscall.EPERM)) == 0 {
		t.Error("no EPERM ioctl on nvidiactl")
	}
}

// RLIMIT_NOFILE=6: nvidiactl opens, nvidia-uvm (both tries) fails with
// EMFILE, and the helper's prlimit64 is not an event.
func TestNoFileLog(t *testing.T) {
	lg := parseFile(t, filepath.Join(faultLogs, "nofile-emfile.strace"))
	checkStream(t, lg)
	pid := theExec(t, lg)
	if ctl := opensOf(lg, "/dev/nvidiactl"); len(ctl) != 1 || ctl[0].Failed() || ctl[0].PID != pid {
		t.Errorf("nvidiactl opens: %+v", ctl)
	}
	uvm := opensOf(lg, "/dev/nvidia-uvm")
	if len(uvm) != 2 || len(failedWith(uvm, syscall.EMFILE)) != 2 {
		t.Fatalf("uvm opens %+v, want 2 EMFILE", uvm)
	}
}

func TestUnverbose(t *testing.T) {
	for in, want := range map[string]string{
		`-100 /* AT_FDCWD */, "/dev/nvidia0", 0x80002 /* O_RDWR|O_CLOEXEC */) = 3`:                       `AT_FDCWD, "/dev/nvidia0", O_RDWR|O_CLOEXEC) = 3`,
		`"/dev/x", {st_mode=020666 /* S_IFCHR|0666 */, st_rdev=0x107 /* makedev(0x1, 0x7) */, ...}) = 0`: `"/dev/x", {st_mode=S_IFCHR|0666, st_rdev=makedev(0x1, 0x7), ...}) = 0`,
		// A comment inside a string is the string's.
		`"a 1 /* b */", 2 /* C */) = 0`: `"a 1 /* b */", C) = 0`,
		// A comment after something that is not a number stays.
		`x /* y */) = 0`:        `x /* y */) = 0`,
		`"unterminated /* x */`: `"unterminated /* x */`,
	} {
		if got := unverbose(in); got != want {
			t.Errorf("unverbose(%q)\n = %q\nwant %q", in, got, want)
		}
	}
}

func TestDecodeDevT(t *testing.T) {
	for _, tc := range []struct {
		v            uint64
		major, minor uint32
	}{
		{0x107, 1, 7}, {0xc3ff, 195, 255}, {0xee00, 238, 0},
		// Minor bits above 0xff live in bits 20-31; major bits above 0xfff in 44-63.
		{0x1000ff00, 255, 0x10000}, {0x100000000000 | 0x100, 0x1001, 0},
	} {
		ma, mi := decodeDevT(tc.v)
		if ma != tc.major || mi != tc.minor {
			t.Errorf("decodeDevT(%#x) = %d:%d, want %d:%d", tc.v, ma, mi, tc.major, tc.minor)
		}
	}
}
