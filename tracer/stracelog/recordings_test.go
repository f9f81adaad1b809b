package stracelog

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cudatrace/cudatrace/tracer"
)

// The recordings are real strace -f -yy -tt -T logs of cuInit on an H200
// (see testdata/strace/h200/README.md); every value asserted here was
// read off the log lines quoted in the comments.

const recordings = "../../testdata/strace/h200"

func parseFile(t testing.TB, path string) *Log {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	lg, err := Parse(f)
	if err != nil {
		t.Fatalf("Parse(%s): %v", path, err)
	}
	return lg
}

func parseText(t testing.TB, s string) *Log {
	t.Helper()
	lg, err := Parse(strings.NewReader(s))
	if err != nil {
		t.Fatalf("Parse: %v\n%s", err, s)
	}
	return lg
}

// find returns the events that match.
func find(lg *Log, match func(e *tracer.Event) bool) []*tracer.Event {
	var out []*tracer.Event
	for i := range lg.Events {
		if match(&lg.Events[i]) {
			out = append(out, &lg.Events[i])
		}
	}
	return out
}

func opensOf(lg *Log, path string) []*tracer.Event {
	return find(lg, func(e *tracer.Event) bool { return e.Kind == tracer.KindOpen && e.Path == path })
}

func ioctlsOn(lg *Log, path string) []*tracer.Event {
	return find(lg, func(e *tracer.Event) bool { return e.Kind == tracer.KindIoctl && e.Path == path })
}

func dev(ma, mi uint32) *tracer.Dev { return &tracer.Dev{Major: ma, Minor: mi} }

func sameDev(a, b *tracer.Dev) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// checkStream checks what every event stream must satisfy.
func checkStream(t *testing.T, lg *Log) {
	t.Helper()
	var last time.Duration
	for i, e := range lg.Events {
		if e.Seq != uint64(i+1) {
			t.Fatalf("event %d has Seq %d", i, e.Seq)
		}
		if e.Time < last {
			t.Fatalf("event %d goes back in time: %v after %v", e.Seq, e.Time, last)
		}
		last = e.Time
		if e.Kind == "" || (e.Syscall == "" && e.Kind != tracer.KindExit) {
			t.Fatalf("event %d has no kind or syscall: %+v", e.Seq, e)
		}
	}
	if lg.Skipped > lg.Lines {
		t.Fatalf("Skipped %d > Lines %d", lg.Skipped, lg.Lines)
	}
}

func TestDenyUVM(t *testing.T) {
	lg := parseFile(t, filepath.Join(recordings, "cuinit-deny-uvm.strace"))
	checkStream(t, lg)
	if !lg.HasPIDs || !lg.HasTimes || !lg.HasFDPaths || !lg.HasDevNumbers {
		t.Errorf("a -f -yy -tt log: got %+v", lg)
	}
	if lg.Lines != 655 || lg.Skipped != 0 || lg.Unfinished != 0 {
		t.Errorf("Lines %d Skipped %d Unfinished %d, want 655 0 0", lg.Lines, lg.Skipped, lg.Unfinished)
	}

	// 639 14:58:43.981226 openat(AT_FDCWD</root>, "/dev/nvidia-uvm", O_RDWR|O_CLOEXEC) = -1 EPERM
	// 639 14:58:43.981266 openat(AT_FDCWD</root>, "/dev/nvidia-uvm", O_RDWR) = -1 EPERM
	uvm := opensOf(lg, "/dev/nvidia-uvm")
	if len(uvm) != 2 {
		t.Fatalf("want 2 opens of /dev/nvidia-uvm, got %d", len(uvm))
	}
	for i, wantFlags := range []uint64{0x2 | 0x80000, 0x2} {
		e := uvm[i]
		if e.Errno() != syscall.EPERM || e.Flags != wantFlags || e.PID != 639 || e.TID != 639 ||
			e.Comm != "python3" || e.Syscall != "openat" || e.Dev != nil {
			t.Errorf("uvm open %d: %+v", i, e)
		}
	}
	// Times count from the first line, the execve at 14:58:43.866763.
	if want := 114463 * time.Microsecond; uvm[0].Time != want {
		t.Errorf("first uvm open at %v, want %v", uvm[0].Time, want)
	}

	// 639 14:58:43.981309 ioctl(-1, _IOC(_IOC_NONE, 0, 0x2, 0x3000), 0) = -1 EBADF
	next := lg.Events[uvm[1].Seq] // Seq is index+1: this is the event after
	if next.Kind != tracer.KindIoctl || next.FD != -1 || next.Errno() != syscall.EBADF || next.Request != 0x30000002 {
		t.Errorf("after the failed opens: %+v", next)
	}

	// 639 14:58:43.978506 openat(AT_FDCWD</root>, "/dev/nvidiactl", O_RDWR) = 8</dev/nvidiactl<char 195:255>>
	ctl := opensOf(lg, "/dev/nvidiactl")
	if len(ctl) != 2 {
		t.Fatalf("want 2 opens of /dev/nvidiactl, got %d", len(ctl))
	}
	for _, e := range ctl {
		if e.Ret != 8 || e.Flags != 2 || !sameDev(e.Dev, dev(195, 255)) {
			t.Errorf("nvidiactl open: %+v", e)
		}
	}

	// 639 14:58:43.980991 stat("/dev/nvidia-uvm", {st_mode=S_IFCHR|0666, st_rdev=makedev(0xee, 0), ...}) = 0
	st := find(lg, func(e *tracer.Event) bool { return e.Kind == tracer.KindStat && e.Path == "/dev/nvidia-uvm" })
	if len(st) != 2 {
		t.Fatalf("want 2 stats of /dev/nvidia-uvm, got %d", len(st))
	}
	if st[0].Ret != 0 || st[0].Mode != 0o20666 || !sameDev(st[0].Dev, dev(238, 0)) {
		t.Errorf("uvm stat: %+v", st[0])
	}

	// 14 ioctls on nvidiactl, the first 0xd6 (8 bytes), the last two RM_FREE.
	ioc := ioctlsOn(lg, "/dev/nvidiactl")
	if len(ioc) != 14 {
		t.Fatalf("want 14 ioctls on nvidiactl, got %d", len(ioc))
	}
	if ioc[0].Request != 0xC00846D6 || ioc[0].FD != 8 || !sameDev(ioc[0].Dev, dev(195, 255)) {
		t.Errorf("first nvidiactl ioctl: %+v", ioc[0])
	}
	if ioc[13].Request != 0xC0104629 {
		t.Errorf("last nvidiactl ioctl request %#x, want RM_FREE 0xC0104629", ioc[13].Request)
	}
	rmControl := find(lg, func(e *tracer.Event) bool { return e.Request == 0xC020462A })
	if len(rmControl) != 4 { // lines 616, 634, 635 and 637
		t.Errorf("want 4 RM_CONTROL ioctls, got %d", len(rmControl))
	}

	// 639 14:58:43.990740 exit_group(0) = ?   (-qq: no +++ line)
	last := lg.Events[len(lg.Events)-1]
	if last.Kind != tracer.KindExit || last.ExitCode != 0 || last.PID != 639 {
		t.Errorf("last event: %+v", last)
	}
	if lg.Exit == nil || *lg.Exit != (tracer.ExitStatus{Code: 0}) {
		t.Errorf("Exit = %+v", lg.Exit)
	}
	// symlink("../nvidia-uvm", "/dev/char/238:0") = -1 ENOENT
	sl := find(lg, func(e *tracer.Event) bool { return e.Kind == tracer.KindSymlink && e.Path == "/dev/char/238:0" })
	if len(sl) != 1 || sl[0].Target != "../nvidia-uvm" || sl[0].Errno() != syscall.ENOENT {
		t.Errorf("uvm symlink: %+v", sl)
	}
}

func TestDeny195SMI(t *testing.T) {
	lg := parseFile(t, filepath.Join(recordings, "cuinit-deny-195-smi.strace"))
	checkStream(t, lg)
	// 651 14:58:44.017470 openat(AT_FDCWD</root>, "/dev/nvidiactl", O_RDWR) = -1 EPERM
	// 651 14:58:44.017527 openat(AT_FDCWD</root>, "/dev/nvidiactl", O_RDONLY) = -1 EPERM
	ctl := opensOf(lg, "/dev/nvidiactl")
	if len(ctl) != 2 {
		t.Fatalf("want 2 opens of /dev/nvidiactl, got %d", len(ctl))
	}
	for i, wantFlags := range []uint64{2, 0} {
		if e := ctl[i]; e.Errno() != syscall.EPERM || e.Flags != wantFlags || e.PID != 651 || e.Comm != "nvidia-smi" {
			t.Errorf("nvidiactl open %d: %+v", i, e)
		}
	}
	// The capability nodes (major 241) open fine:
	// openat(AT_FDCWD</root>, "/dev/nvidia-caps/nvidia-cap1", O_RDONLY|O_CLOEXEC) = 9</dev/nvidia-caps/nvidia-cap1<char 241:1>>
	caps := opensOf(lg, "/dev/nvidia-caps/nvidia-cap1")
	if len(caps) != 1 || caps[0].Ret != 9 || caps[0].Flags != 0x80000 || !sameDev(caps[0].Dev, dev(241, 1)) {
		t.Errorf("cap1 open: %+v", caps)
	}
	// then NVML's RM_ALLOC goes to fd -1 twice: ioctl(-1, _IOC(_IOC_READ|_IOC_WRITE, 0x46, 0x2b, 0x30), ...) = -1 EBADF
	bad := find(lg, func(e *tracer.Event) bool { return e.Kind == tracer.KindIoctl })
	if len(bad) != 2 {
		t.Fatalf("want 2 ioctls, got %d", len(bad))
	}
	for _, e := range bad {
		if e.FD != -1 || e.Request != 0xC030462B || e.Errno() != syscall.EBADF {
			t.Errorf("ioctl: %+v", e)
		}
	}
	// mkdir("/dev/nvidia-caps", 0755) = -1 EEXIST
	mk := find(lg, func(e *tracer.Event) bool { return e.Kind == tracer.KindMkdir })
	if len(mk) != 2 || mk[0].Path != "/dev/nvidia-caps" || mk[0].Mode != 0o755 || mk[0].Errno() != syscall.EEXIST {
		t.Errorf("mkdir: %+v", mk)
	}
	// access("/dev/nvidia-caps/nvidia-cap1", R_OK) = 0
	acc := find(lg, func(e *tracer.Event) bool { return e.Kind == tracer.KindAccess })
	if len(acc) != 2 || acc[0].Path != "/dev/nvidia-caps/nvidia-cap1" || acc[0].Flags != 4 || acc[0].Ret != 0 {
		t.Errorf("access: %+v", acc)
	}
	// stat("/dev/nvidia-caps/nvidia-cap2", {st_mode=S_IFCHR|0444, st_rdev=makedev(0xf1, 0x2), ...}) = 0
	st := find(lg, func(e *tracer.Event) bool {
		return e.Kind == tracer.KindStat && e.Path == "/dev/nvidia-caps/nvidia-cap2"
	})
	if len(st) == 0 || st[0].Mode != 0o20444 || !sameDev(st[0].Dev, dev(241, 2)) {
		t.Errorf("cap2 stat: %+v", st)
	}
	// NVML: openat(AT_FDCWD</root>, "/usr/local/nvidia/lib64/libnvidia-ml.so.1", O_RDONLY|O_CLOEXEC) = 3</...>
	if ml := opensOf(lg, "/usr/local/nvidia/lib64/libnvidia-ml.so.1"); len(ml) != 1 || ml[0].Ret != 3 {
		t.Errorf("libnvidia-ml open: %+v", ml)
	}
	// 651 14:58:44.021285 exit_group(255) = ?
	if lg.Exit == nil || lg.Exit.Code != 255 || lg.Exit.Signal != 0 {
		t.Errorf("Exit = %+v", lg.Exit)
	}
}

func TestOKRecordings(t *testing.T) {
	for _, tc := range []struct {
		file string
		pid  int
	}{
		{"cuinit-ok-root.strace", 614},
		{"cuinit-ok-nobody.strace", 623},
	} {
		t.Run(tc.file, func(t *testing.T) {
			lg := parseFile(t, filepath.Join(recordings, tc.file))
			checkStream(t, lg)
			if lg.Skipped != 0 {
				t.Errorf("Skipped %d", lg.Skipped)
			}
			// Counted with grep 'ioctl([0-9]*</dev/nvidiactl' and friends.
			for path, want := range map[string]int{"/dev/nvidiactl": 97, "/dev/nvidia-uvm": 5, "/dev/nvidia0": 5} {
				if got := len(ioctlsOn(lg, path)); got != want {
					t.Errorf("%d ioctls on %s, want %d", got, path, want)
				}
			}
			all := find(lg, func(e *tracer.Event) bool { return e.Kind == tracer.KindIoctl })
			if len(all) != 107 {
				t.Errorf("%d NVIDIA ioctls, want 107 (the other 84 are TCGETS on files)", len(all))
			}
			for _, e := range all {
				if e.Failed() || e.PID != tc.pid {
					t.Errorf("ioctl: %+v", e)
				}
			}
			// ioctl(9</dev/nvidia-uvm<char 238:0>>, _IOC(_IOC_NONE, 0, 0x1, 0x3000), ...) = 0  (UVM_INITIALIZE)
			// ioctl(10</dev/nvidia-uvm<char 238:0>>, _IOC(_IOC_NONE, 0, 0x4b, 0), ...) = 0
			uvm := ioctlsOn(lg, "/dev/nvidia-uvm")
			if uvm[0].Request != 0x30000001 || uvm[0].FD != 9 || uvm[1].Request != 0x4b || uvm[1].FD != 10 ||
				!sameDev(uvm[0].Dev, dev(238, 0)) {
				t.Errorf("uvm ioctls: %+v %+v", uvm[0], uvm[1])
			}
			// The only NVIDIA call that fails is the loader's first try
			// at libcuda; stats and /dev/char links fail with ENOENT as
			// they do on any host without /dev/char links or nvidia-modprobe.
			for _, e := range find(lg, func(e *tracer.Event) bool { return e.Failed() }) {
				switch {
				case e.Kind == tracer.KindOpen && e.Path == "/opt/tools/lib/libcuda.so.1" && e.Errno() == syscall.ENOENT:
				case (e.Kind == tracer.KindStat || e.Kind == tracer.KindUnlink || e.Kind == tracer.KindSymlink) &&
					e.Errno() == syscall.ENOENT && (strings.HasPrefix(e.Path, "/dev/char/") || e.Path == "/usr/bin/nvidia-modprobe"):
				default:
					t.Errorf("unexpected failure: %+v", e)
				}
			}
			if o := opensOf(lg, "/dev/nvidia-uvm"); len(o) != 2 || o[0].Ret != 9 || o[1].Ret != 10 || !sameDev(o[0].Dev, dev(238, 0)) {
				t.Errorf("uvm opens: %+v", o)
			}
			if lg.Exit == nil || *lg.Exit != (tracer.ExitStatus{}) {
				t.Errorf("Exit = %+v", lg.Exit)
			}
		})
	}
}

// annotations matches what -y and -yy add to fds ("8</dev/nvidiactl<char 195:255>>")
// and what -T adds to results ("<0.000013>").
var (
	annotations = regexp.MustCompile(`<[^<>]*(<[^<>]*>)?>`)
	devNumbers  = regexp.MustCompile(`<char \d+:\d+>`)
)

// Without -y the importer must find the same NVIDIA ioctls from the opens
// alone, and with -y but not -yy from the fd paths.
func TestRecordingWithoutAnnotations(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(recordings, "cuinit-ok-root.strace"))
	if err != nil {
		t.Fatal(err)
	}
	full := parseText(t, string(raw))
	for name, text := range map[string]string{
		"plain": annotations.ReplaceAllString(string(raw), ""),
		"-y":    devNumbers.ReplaceAllString(string(raw), ""),
	} {
		t.Run(name, func(t *testing.T) {
			lg := parseText(t, text)
			checkStream(t, lg)
			if lg.HasDevNumbers || lg.HasFDPaths != (name == "-y") {
				t.Errorf("HasFDPaths %v HasDevNumbers %v", lg.HasFDPaths, lg.HasDevNumbers)
			}
			if len(lg.Events) != len(full.Events) {
				t.Fatalf("%d events, want %d as with -yy", len(lg.Events), len(full.Events))
			}
			for i, e := range lg.Events {
				f := full.Events[i]
				if e.Kind != f.Kind || e.Path != f.Path || e.FD != f.FD || e.Request != f.Request || e.Ret != f.Ret || e.Time != f.Time {
					t.Fatalf("event %d: %+v\nwith -yy: %+v", i, e, f)
				}
				// Only stat results carry device numbers without -yy.
				if e.Kind != tracer.KindStat && e.Dev != nil {
					t.Fatalf("event %d has a device number the log did not show: %+v", i, e)
				}
			}
		})
	}
}
