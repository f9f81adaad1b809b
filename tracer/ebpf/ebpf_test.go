package ebpf

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/cudatrace/cudatrace/internal/fakeinband"
	"github.com/cudatrace/cudatrace/internal/fakelib"
	"github.com/cudatrace/cudatrace/internal/fakelimits"
	"github.com/cudatrace/cudatrace/internal/privtest"
	"github.com/cudatrace/cudatrace/internal/scenario/faults"
	"github.com/cudatrace/cudatrace/snapshot"
	"github.com/cudatrace/cudatrace/tracer"
	"github.com/cudatrace/cudatrace/tracer/launch"
)

func TestMain(m *testing.M) {
	launch.RunLoaderIfRequested()
	if len(os.Args) > 1 && os.Args[1] == helperArg {
		os.Exit(helperMain(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == faultsArg {
		os.Exit(faults.Main(os.Args[2:], os.Stderr))
	}
	os.Exit(m.Run())
}

// helperArg makes the test binary a target that issues syscalls a shell
// cannot: from a second thread, on fd -1.
const helperArg = "ebpftrace-helper"

// faultsArg makes the test binary the scenarios' fault helper (faultexec):
// it installs a seccomp filter, then execs the rest of its command line.
const faultsArg = "ebpftrace-faults"

func helperMain(args []string) int {
	runtime.LockOSThread() // keep main on one thread, so the goroutine below gets another
	for len(args) >= 2 {
		op, path := args[0], args[1]
		args = args[2:]
		switch op {
		case "thread-open": // open from a thread that is not the group leader
			done := make(chan error)
			go func() {
				runtime.LockOSThread()
				if unix.Gettid() == unix.Getpid() {
					done <- errors.New("goroutine on the main thread")
					return
				}
				fd, err := unix.Open(path, unix.O_RDONLY, 0)
				if err == nil {
					unix.Close(fd)
				}
				done <- err
			}()
			if err := <-done; err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
		case "ioctl-badfd": // what libcuda does after a failed uvm open
			unix.IoctlGetInt(-1, unix.TCGETS)
		case "open-ioctl": // an ioctl on the node at path
			fd, err := unix.Open(path, unix.O_RDWR, 0)
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			unix.IoctlGetInt(fd, unix.TCGETS)
			unix.Close(fd)
		case "cold-open": // the path sits in a page not yet faulted in
			if err := coldOpen(path); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
		case "open-fail": // the same path through every open syscall; all fail
			openEverywhere(path, unix.O_RDONLY)
		case "creat": // x86-64 only
			if fd, err := legacyCreat(path, 0o600); err == nil {
				unix.Close(fd)
			}
		case "leader-exits-first": // the leader thread ends; another thread ends the process
			go func() {
				runtime.LockOSThread()
				time.Sleep(50 * time.Millisecond) // after the leader's exit, not a timing assertion
				os.Exit(0)
			}()
			unix.RawSyscall(unix.SYS_EXIT, 0, 0, 0) // this thread only
		case "memfd":
			fd, err := unix.MemfdCreate(path, unix.MFD_CLOEXEC)
			if err == nil {
				unix.Close(fd)
			}
		case "repeat": // foldRounds × {open, a successful ioctl, a failing one, close} from foldThreads threads
			if err := repeatCalls(path); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
		case "limits": // limitRounds × each exit-only call, failed by a limit
			if err := fakelimits.Run(); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
		case "inband-repeat": // successful ioctls, one with a failure in its params
			if err := fakeinband.Repeat(path); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
		case "probe": // print Probe's verdict; exit 3 when unavailable
			err := Probe()
			fmt.Println(err)
			if errors.Is(err, tracer.ErrUnavailable) {
				return 3
			}
		}
	}
	return 0
}

// openEverywhere opens path through openat, openat2 and (x86-64) open.
func openEverywhere(path string, flags int) {
	for _, open := range []func() (int, error){
		func() (int, error) { return unix.Openat(unix.AT_FDCWD, path, flags, 0) },
		func() (int, error) { return unix.Openat2(unix.AT_FDCWD, path, &unix.OpenHow{Flags: uint64(flags)}) },
		func() (int, error) { return legacyOpen(path, flags) },
	} {
		if fd, err := open(); err == nil {
			unix.Close(fd)
		}
	}
}

// recorder is a Sink that keeps everything.
type recorder struct {
	mu     sync.Mutex
	events []*tracer.Event
}

// Event keeps a deep copy: the backend reuses what e points to.
func (r *recorder) Event(e *tracer.Event) {
	c := e.Copy()
	r.mu.Lock()
	r.events = append(r.events, &c)
	r.mu.Unlock()
}

func (r *recorder) find(match func(*tracer.Event) bool) []*tracer.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*tracer.Event
	for _, e := range r.events {
		if match(e) {
			out = append(out, e)
		}
	}
	return out
}

func (r *recorder) dump() string {
	var b strings.Builder
	for _, e := range r.events {
		fmt.Fprintf(&b, "  %+v\n", *e)
	}
	return b.String()
}

// fakeNode creates a character device under /dev whose name starts with
// /dev/nvidia (so the path filters apply), here c 1:3 like /dev/null.
func fakeNode(t *testing.T, stem string) string {
	t.Helper()
	privtest.RequireRoot(t) // before mknod: as an ordinary user the test skips, not fails
	p := fmt.Sprintf("/dev/%s-cudatrace-test-%08x", stem, rand.Uint32())
	if err := unix.Mknod(p, unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
		t.Fatalf("mknod %s: %v", p, err)
	}
	t.Cleanup(func() { os.Remove(p) })
	return p
}

func traceCmd(t *testing.T, spec tracer.Spec, script string) (*tracer.Result, *recorder) {
	t.Helper()
	privtest.RequireRoot(t)
	spec.Argv = []string{"/bin/sh", "-c", script}
	if spec.DeviceMajors == nil {
		spec.DeviceMajors = []uint32{1}
	}
	rec := &recorder{}
	res, err := New().Run(privtest.Deadline(t), spec, rec)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return res, rec
}

// coldOpen opens path through a pointer into a fresh file mapping that no
// one has touched: the BPF read at syscall entry finds no page.
func coldOpen(path string) error {
	atFDCWD := unix.AT_FDCWD
	f, err := os.CreateTemp("", "cold-path-")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	if _, err := f.WriteString(path + "\x00"); err != nil {
		return err
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, os.Getpagesize(), unix.PROT_READ, unix.MAP_PRIVATE)
	if err != nil {
		return err
	}
	defer unix.Munmap(mem)
	addr := uintptr(unsafe.Pointer(&mem[0])) // the address only: nothing is read
	// The page must not be mapped yet (pagemap's present bit), or the
	// entry program would read it and nothing cold is tested.
	var entry [8]byte
	if pm, err := os.Open("/proc/self/pagemap"); err == nil {
		_, err = pm.ReadAt(entry[:], int64(addr/uintptr(os.Getpagesize()))*8)
		pm.Close()
		if err == nil && entry[7]&0x80 != 0 {
			return errors.New("cold-open: the path's page is mapped already")
		}
	}
	fd, _, errno := unix.Syscall6(unix.SYS_OPENAT, uintptr(atFDCWD), addr, unix.O_RDONLY, 0, 0, 0)
	if errno != 0 {
		return errno
	}
	return unix.Close(int(fd))
}

func byPath(path string) func(*tracer.Event) bool {
	return func(e *tracer.Event) bool { return e.Path == path }
}

func one(t *testing.T, rec *recorder, what string, match func(*tracer.Event) bool) *tracer.Event {
	t.Helper()
	got := rec.find(match)
	if len(got) != 1 {
		t.Fatalf("%s: %d events, want 1; all events:\n%s", what, len(got), rec.dump())
	}
	return got[0]
}

func wantDev(t *testing.T, e *tracer.Event, major, minor uint32) {
	t.Helper()
	if e.Dev == nil || e.Dev.Major != major || e.Dev.Minor != minor {
		t.Errorf("%s %s: dev %v, want %d:%d", e.Syscall, e.Path, e.Dev, major, minor)
	}
}

func checkComplete(t *testing.T, res *tracer.Result) {
	t.Helper()
	if res.Dropped != 0 {
		t.Errorf("Dropped = %d, want 0 (notes %q)", res.Dropped, res.Notes)
	}
	if res.Backend != "ebpf" || res.Events == 0 || res.Ended.Before(res.Started) {
		t.Errorf("result %+v", res)
	}
}

func TestOpenIoctlAndFailures(t *testing.T) {
	node := fakeNode(t, "nvidiactl")
	missing := fmt.Sprintf("/dev/nvidia-uvm-cudatrace-test-missing-%08x", rand.Uint32())
	// stty opens the node as stdin and asks it for termios: ENOTTY.
	res, rec := traceCmd(t, tracer.Spec{}, fmt.Sprintf(
		"exec 3<>%s; { true < %s; } 2>/dev/null; stty < %s; exit 0", node, missing, node))
	checkComplete(t, res)
	if res.Exit == nil || res.Exit.Code != 0 || !res.Launched {
		t.Fatalf("exit %+v launched %v", res.Exit, res.Launched)
	}

	opens := rec.find(func(e *tracer.Event) bool { return e.Kind == tracer.KindOpen && e.Path == node })
	if len(opens) != 2 {
		t.Fatalf("%d opens of %s, want 2 (sh, stty):\n%s", len(opens), node, rec.dump())
	}
	first := opens[0]
	if first.Ret != 3 || first.Syscall != "openat" || first.Flags&unix.O_ACCMODE != unix.O_RDWR || first.Comm != "sh" {
		t.Errorf("first open %+v, want openat O_RDWR returning fd 3 by sh", *first)
	}
	wantDev(t, first, 1, 3)

	failed := one(t, rec, "open of the missing node", byPath(missing))
	if failed.Ret != -int64(unix.ENOENT) || failed.Dev != nil || failed.ErrnoName() != "ENOENT" {
		t.Errorf("missing open %+v, want ENOENT without a device", *failed)
	}

	ioctl := one(t, rec, "stty's TCGETS", func(e *tracer.Event) bool {
		return e.Kind == tracer.KindIoctl && e.Request == unix.TCGETS
	})
	if ioctl.FD != 0 || ioctl.Ret != -int64(unix.ENOTTY) || ioctl.Comm != "stty" || ioctl.Syscall != "ioctl" {
		t.Errorf("ioctl %+v, want TCGETS on fd 0 by stty failing ENOTTY", *ioctl)
	}
	wantDev(t, ioctl, 1, 3)
	// The params block is a struct termios on stty's stack: a user pointer.
	if len(ioctl.Arg) == 0 {
		t.Errorf("ioctl params block not captured")
	}
	// stty's other ioctls went to its stdout/stderr, not NVIDIA nodes.
	for _, e := range rec.find(func(e *tracer.Event) bool { return e.Kind == tracer.KindIoctl }) {
		if e.Dev == nil || e.Dev.Major != 1 {
			t.Errorf("ioctl on a non-NVIDIA fd recorded: %+v", *e)
		}
	}

	exec := rec.find(func(e *tracer.Event) bool { return e.Kind == tracer.KindExec && e.Path == "/usr/bin/stty" })
	if len(exec) != 1 || exec[0].Ret != 0 || len(exec[0].Argv) == 0 || exec[0].Argv[0] != "stty" {
		t.Errorf("stty exec: %+v", exec)
	}
}

func TestIoctlOnBadFD(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	privtest.RequireRoot(t)
	rec := &recorder{}
	res, err := New().Run(privtest.Deadline(t), tracer.Spec{
		Argv: []string{self, helperArg, "ioctl-badfd", "-"}, DeviceMajors: []uint32{1},
	}, rec)
	if err != nil {
		t.Fatal(err)
	}
	checkComplete(t, res)
	e := one(t, rec, "ioctl on fd -1", func(e *tracer.Event) bool { return e.Kind == tracer.KindIoctl })
	if e.FD != -1 || e.Ret != -int64(unix.EBADF) || e.Dev != nil || e.Request != unix.TCGETS {
		t.Errorf("ioctl %+v, want TCGETS on fd -1 failing EBADF", *e)
	}
}

func TestNodeRepairCalls(t *testing.T) {
	base := fmt.Sprintf("/dev/nvidia-cudatrace-test-%08x", rand.Uint32())
	node, link, dir := base+"-node", base+"-link", base+"-dir"
	t.Cleanup(func() {
		os.Remove(node)
		os.Remove(link)
		os.Remove(dir)
	})
	res, rec := traceCmd(t, tracer.Spec{}, fmt.Sprintf(
		"mknod -m 0640 %[1]s c 1 5 && stat %[1]s >/dev/null && test -c %[1]s && ln -s %[1]s %[2]s && mkdir %[3]s && rm %[2]s %[1]s && rm -r %[3]s",
		node, link, dir))
	checkComplete(t, res)
	if res.Exit == nil || res.Exit.Code != 0 {
		t.Fatalf("script failed: %+v\n%s", res.Exit, rec.dump())
	}

	mk := one(t, rec, "mknod", func(e *tracer.Event) bool { return e.Kind == tracer.KindMknod })
	if mk.Path != node || mk.Ret != 0 || mk.Mode&unix.S_IFMT != unix.S_IFCHR {
		t.Errorf("mknod %+v", *mk)
	}
	wantDev(t, mk, 1, 5)

	stats := rec.find(func(e *tracer.Event) bool { return e.Kind == tracer.KindStat && e.Path == node })
	if len(stats) < 2 { // coreutils stat, and the shell's test -c
		t.Fatalf("%d stats of %s, want 2 or more:\n%s", len(stats), node, rec.dump())
	}
	for _, st := range stats {
		if st.Ret != 0 || st.Mode&unix.S_IFMT != unix.S_IFCHR {
			t.Errorf("stat %+v: want a char device", *st)
		}
		wantDev(t, st, 1, 5)
	}

	sl := one(t, rec, "symlink", func(e *tracer.Event) bool { return e.Kind == tracer.KindSymlink })
	if sl.Path != link || sl.Target != node || sl.Ret != 0 {
		t.Errorf("symlink %+v", *sl)
	}
	md := one(t, rec, "mkdir", func(e *tracer.Event) bool { return e.Kind == tracer.KindMkdir })
	if md.Path != dir || md.Ret != 0 {
		t.Errorf("mkdir %+v", *md)
	}
	for _, p := range []string{node, link, dir} {
		u := one(t, rec, "unlink "+p, func(e *tracer.Event) bool { return e.Kind == tracer.KindUnlink && e.Path == p })
		if u.Ret != 0 {
			t.Errorf("unlink %+v", *u)
		}
	}
	// Paths outside /dev/nvidia* and /dev/char/ are not recorded.
	for _, e := range rec.find(func(e *tracer.Event) bool { return e.Kind == tracer.KindStat }) {
		if !strings.HasPrefix(e.Path, "/dev/nvidia") {
			t.Errorf("unrelated stat recorded: %+v", *e)
		}
	}
}

func TestDescendantsAndThreads(t *testing.T) {
	node := fakeNode(t, "nvidia0")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	res, rec := traceCmd(t, tracer.Spec{}, fmt.Sprintf(
		`sh -c "sh -c ': < %[1]s'"; %[2]s %[3]s thread-open %[1]s`, node, self, helperArg))
	checkComplete(t, res)
	opens := rec.find(byPath(node))
	if len(opens) != 2 {
		t.Fatalf("%d opens, want 2:\n%s", len(opens), rec.dump())
	}
	top := rec.find(func(e *tracer.Event) bool { return e.Kind == tracer.KindExec })[0].PID

	grandchild := opens[0]
	if grandchild.PID == top || grandchild.TID != grandchild.PID || grandchild.Ret < 0 {
		t.Errorf("grandchild open %+v (top PID %d)", *grandchild, top)
	}
	// The grandchild's exit was seen, with its status.
	ex := one(t, rec, "grandchild exit", func(e *tracer.Event) bool {
		return e.Kind == tracer.KindExit && e.PID == grandchild.PID
	})
	if ex.ExitCode != 0 || ex.Signal != 0 {
		t.Errorf("grandchild exit %+v", *ex)
	}

	thread := opens[1]
	if thread.TID == thread.PID || thread.PID == top || thread.Ret < 0 {
		t.Errorf("thread open %+v: want a non-leader thread of the helper", *thread)
	}
	helperExec := one(t, rec, "helper exec", func(e *tracer.Event) bool { return e.Kind == tracer.KindExec && e.Path == self })
	if helperExec.PID != thread.PID {
		t.Errorf("thread open in PID %d, helper is PID %d", thread.PID, helperExec.PID)
	}
}

func TestExitStatus(t *testing.T) {
	for _, tc := range []struct {
		script       string
		code, signal int
	}{
		{"exit 7", 7, 0},
		{"kill -9 $$", 0, 9},
	} {
		t.Run(tc.script, func(t *testing.T) {
			res, rec := traceCmd(t, tracer.Spec{}, tc.script)
			checkComplete(t, res)
			if res.Exit == nil || res.Exit.Code != tc.code || res.Exit.Signal != tc.signal {
				t.Errorf("Result.Exit = %+v, want code %d signal %d", res.Exit, tc.code, tc.signal)
			}
			ex := one(t, rec, "exit event", func(e *tracer.Event) bool { return e.Kind == tracer.KindExit })
			if ex.ExitCode != tc.code || ex.Signal != tc.signal || ex.Comm != "sh" {
				t.Errorf("exit event %+v, want code %d signal %d", *ex, tc.code, tc.signal)
			}
		})
	}
}

// An untraced process doing the same opens at the same time leaves no trace.
func TestUntracedNeighbour(t *testing.T) {
	node := fakeNode(t, "nvidiactl")
	privtest.RequireRoot(t)
	neighbour := exec.Command("/bin/sh", "-c", fmt.Sprintf("while :; do : < %s; done", node))
	if err := neighbour.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		neighbour.Process.Kill()
		neighbour.Wait()
	}()
	res, rec := traceCmd(t, tracer.Spec{}, fmt.Sprintf("i=0; while [ $i -lt 200 ]; do : < %s; i=$((i+1)); done", node))
	checkComplete(t, res)
	ours := rec.find(byPath(node))
	if len(ours) != 200 {
		t.Errorf("%d opens recorded, want the target's 200", len(ours))
	}
	for _, e := range rec.events {
		if e.PID == neighbour.Process.Pid {
			t.Fatalf("event from the untraced neighbour: %+v", *e)
		}
	}
}

func TestLibraryAndProcOpens(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	lib := dir + "/libcuda.so.1"
	nvml := dir + "/libnvidia-ml.so.1"
	if err := os.WriteFile(lib, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	res, rec := traceCmd(t, tracer.Spec{}, fmt.Sprintf(
		"cat %s /proc/devices > /dev/null; { cat %s; } 2>/dev/null; cat %s/libcudart.so /proc/version 2>/dev/null >/dev/null; %s %s memfd cuda-probe; true",
		lib, nvml, dir, self, helperArg))
	checkComplete(t, res)
	for path, ret := range map[string]int64{lib: 3, nvml: -int64(unix.ENOENT), "/proc/devices": 3} {
		e := one(t, rec, "open of "+path, byPath(path))
		if e.Kind != tracer.KindOpen || e.Ret != ret || e.Dev != nil {
			t.Errorf("open %+v, want ret %d and no device", *e, ret)
		}
	}
	for _, path := range []string{dir + "/libcudart.so", "/proc/version"} {
		if got := rec.find(byPath(path)); len(got) != 0 {
			t.Errorf("unrelated open recorded: %+v", *got[0])
		}
	}
	m := one(t, rec, "memfd_create", func(e *tracer.Event) bool { return e.Kind == tracer.KindMemfd })
	if m.Path != "cuda-probe" || m.Ret < 0 || m.Flags != unix.MFD_CLOEXEC || m.Syscall != "memfd_create" {
		t.Errorf("memfd %+v", *m)
	}
}

// A failed open of a path the filter does not know is not recorded: python
// probes dozens of library and locale paths that do not exist. The same
// failures on a device path are.
func TestFailedUnmatchedOpenNotRecorded(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	file := dir + "/regular"
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	unmatched := []string{
		dir + "/missing.so.1",                     // ENOENT
		"/usr/lib/locale/cudatrace-test/LC_CTYPE", // ENOENT, as glibc's locale probes
		file + "/below-a-file",                    // ENOTDIR
	}
	node := fmt.Sprintf("/dev/nvidia-uvm-cudatrace-test-missing-%08x", rand.Uint32())
	args := []string{self, helperArg}
	for _, p := range append(unmatched, node) {
		args = append(args, "open-fail", p)
	}
	privtest.RequireRoot(t)
	rec := &recorder{}
	res, err := New().Run(privtest.Deadline(t), tracer.Spec{Argv: args, DeviceMajors: []uint32{1}}, rec)
	if err != nil {
		t.Fatal(err)
	}
	checkComplete(t, res)
	for _, p := range unmatched {
		if got := rec.find(byPath(p)); len(got) != 0 {
			t.Errorf("failed open of %s recorded: %+v", p, *got[0])
		}
	}
	want := 2 // openat, openat2
	if haveLegacyOpen {
		want = 3
	}
	got := rec.find(byPath(node))
	if len(got) != want {
		t.Fatalf("%d failed opens of %s recorded, want %d:\n%s", len(got), node, want, rec.dump())
	}
	for _, e := range got {
		if e.Kind != tracer.KindOpen || e.Ret != -int64(unix.ENOENT) {
			t.Errorf("open %+v, want ENOENT", *e)
		}
	}
	// Nothing else was opened by the helper but its own binary's files.
	for _, e := range rec.find(func(e *tracer.Event) bool { return e.Kind == tracer.KindOpen && e.Failed() }) {
		if e.Path != node {
			t.Errorf("unrelated failed open recorded: %+v", *e)
		}
	}
}

// creat is an open: recorded like one, with the flags it implies.
func TestCreat(t *testing.T) {
	if !haveLegacyOpen {
		t.Skip("no creat syscall on " + runtime.GOARCH)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	node := fakeNode(t, "nvidiactl")
	created := fmt.Sprintf("/dev/nvidia-cudatrace-test-creat-%08x", rand.Uint32())
	t.Cleanup(func() { os.Remove(created) })
	res, rec := traceCmd(t, tracer.Spec{}, fmt.Sprintf("%s %s creat %s creat %s creat /tmp", self, helperArg, node, created))
	checkComplete(t, res)
	const flags = unix.O_CREAT | unix.O_WRONLY | unix.O_TRUNC
	dev := one(t, rec, "creat of the node", byPath(node))
	if dev.Kind != tracer.KindOpen || dev.Syscall != "creat" || dev.Ret < 0 || dev.Flags != flags || dev.Mode != 0o600 {
		t.Errorf("creat %+v", *dev)
	}
	wantDev(t, dev, 1, 3)
	file := one(t, rec, "creat of a new file", byPath(created))
	if file.Syscall != "creat" || file.Ret < 0 || file.Dev != nil {
		t.Errorf("creat %+v, want a regular file", *file)
	}
	if got := rec.find(byPath("/tmp")); len(got) != 0 {
		t.Errorf("failed creat of an unrelated path recorded: %+v", *got[0])
	}
}

// A process whose leader thread exits first ends when its last thread does;
// its exit is still reported under the leader's TID, as ptrace does.
func TestExitReportedByLeader(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	privtest.RequireRoot(t)
	rec := &recorder{}
	res, err := New().Run(privtest.Deadline(t), tracer.Spec{
		Argv: []string{self, helperArg, "leader-exits-first", "-"}, DeviceMajors: []uint32{1},
	}, rec)
	if err != nil {
		t.Fatal(err)
	}
	checkComplete(t, res)
	ex := one(t, rec, "exit", func(e *tracer.Event) bool { return e.Kind == tracer.KindExit })
	if ex.TID != ex.PID || ex.ExitCode != 0 {
		t.Errorf("exit %+v, want TID = PID and code 0", *ex)
	}
}

// A device opened through a path the filters do not know (a symlink, here
// /dev/null itself) is still recorded: its fd's inode has an NVIDIA major.
func TestOpenRecordedByMajor(t *testing.T) {
	res, rec := traceCmd(t, tracer.Spec{}, "cat /dev/null; cat /dev/zero | head -c 1 > /dev/full; true")
	checkComplete(t, res)
	null := rec.find(func(e *tracer.Event) bool { return e.Kind == tracer.KindOpen && e.Path == "/dev/null" })
	if len(null) == 0 {
		t.Fatalf("open of /dev/null (c 1:3, a traced major here) not recorded:\n%s", rec.dump())
	}
	wantDev(t, null[0], 1, 3)
	// Not an NVIDIA major in this spec: nothing from /dev/tty (5:0) etc.
	none, rec2 := traceCmd(t, tracer.Spec{DeviceMajors: []uint32{250}}, "cat /dev/null")
	checkComplete(t, none)
	if got := rec2.find(func(e *tracer.Event) bool { return e.Kind == tracer.KindOpen }); len(got) != 0 {
		t.Errorf("open of a non-NVIDIA device recorded: %+v", *got[0])
	}
}

func TestProbe(t *testing.T) {
	privtest.RequireRoot(t)
	if err := Probe(); err != nil {
		t.Fatalf("Probe as root: %v", err)
	}
	// As nobody, Probe says what is missing, in one line.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "ebpftrace-probe-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	bin := dir + "/probe"
	data, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755)
	cmd := exec.Command(bin, helperArg, "probe", "-")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.Output()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Fatalf("probe as nobody: %v, output %q", err, out)
	}
	want := "needs root or CAP_BPF+CAP_PERFMON: running as uid 65534\n"
	if string(out) != want {
		t.Errorf("probe as nobody said %q, want %q", out, want)
	}
}

// A path the enter handler cannot read (its page is not faulted in yet) is
// read again at exit, so the open is still recorded, with its path.
func TestPathInColdPage(t *testing.T) {
	node := fakeNode(t, "nvidiactl")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	res, rec := traceCmd(t, tracer.Spec{DeviceMajors: []uint32{250}}, fmt.Sprintf("%s %s cold-open %s", self, helperArg, node))
	checkComplete(t, res)
	if res.Exit == nil || res.Exit.Code != 0 {
		t.Fatalf("helper failed: %+v", res.Exit)
	}
	e := one(t, rec, "open through a cold page", byPath(node))
	if e.Ret < 0 || e.Kind != tracer.KindOpen {
		t.Errorf("open %+v", *e)
	}
	wantDev(t, e, 1, 3)
}

// Kernels before 6.2 have no bpf_rdonly_cast: the programs then read the
// fd's file and inode field by field. Forced here, the same devices come out.
func TestFdWalkWithoutRdonlyCast(t *testing.T) {
	fieldReads = true
	t.Cleanup(func() { fieldReads = false })
	node := fakeNode(t, "nvidiactl")
	res, rec := traceCmd(t, tracer.Spec{}, fmt.Sprintf("exec 3<>%s; stty < %s; exit 0", node, node))
	checkComplete(t, res)
	opens := rec.find(func(e *tracer.Event) bool { return e.Kind == tracer.KindOpen && e.Path == node })
	if len(opens) != 2 {
		t.Fatalf("%d opens of %s, want 2:\n%s", len(opens), node, rec.dump())
	}
	wantDev(t, opens[0], 1, 3)
	ioctl := one(t, rec, "stty's TCGETS", func(e *tracer.Event) bool {
		return e.Kind == tracer.KindIoctl && e.Request == unix.TCGETS
	})
	wantDev(t, ioctl, 1, 3)
}

// Before 5.17 (no bpf_loop) the path scans run as bounded loops: the
// library's name and nvidia-modprobe's are found as with bpf_loop.
func TestScansWithoutBpfLoop(t *testing.T) {
	boundedLoops = true
	t.Cleanup(func() { boundedLoops = false })
	t.Run("library", TestLibraryAndProcOpens)
	t.Run("node-repair", TestNodeRepairCalls)
	t.Run("host-wide-cold-path", TestHostWideFollowsColdPathOpen)
}

// A node under /dev/nvidia* whose major is another driver's (a stale
// node): its ioctls are recorded, so the ENOTTY they get is seen; the same
// device opened elsewhere by a process that never used the NVIDIA path
// is not.
func TestIoctlOnNvidiaPathOfAnotherDriver(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	privtest.RequireRoot(t)
	node := fakeNode(t, "nvidia-uvm") // c 1:3
	rec := &recorder{}
	res, err := New().Run(privtest.Deadline(t), tracer.Spec{
		Argv: []string{self, helperArg, "open-ioctl", node}, DeviceMajors: []uint32{195},
	}, rec)
	if err != nil {
		t.Fatal(err)
	}
	checkComplete(t, res)
	e := one(t, rec, "ioctl on the node", func(e *tracer.Event) bool { return e.Kind == tracer.KindIoctl && e.FD >= 0 })
	if e.Dev == nil || e.Dev.Major != 1 || e.Dev.Minor != 3 || e.Errno() != unix.ENOTTY {
		t.Errorf("ioctl %+v, want TCGETS on c 1:3 failing ENOTTY", *e)
	}
}

// Each event carries the cgroup its task was in when the call returned,
// recorded in the kernel: a target that moves into another cgroup and
// fails there names that one, which resolves to its path after the target
// is gone (nothing of it is left in /proc to read).
func TestEventsCarryCgroupID(t *testing.T) {
	privtest.RequireRoot(t) // before the cgroup is made
	mnt := ""
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	for _, l := range strings.Split(string(mi), "\n") {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT ... - cgroup2 ...
		if f := strings.Fields(l); len(f) > 4 && f[3] == "/" && strings.Contains(l, " - cgroup2 ") {
			mnt = f[4]
		}
	}
	if mnt == "" {
		privtest.Skip(t, "no cgroup2 mount rooted at / here")
	}
	dir := filepath.Join(mnt, fmt.Sprintf("cudatrace-cgid-%08x", rand.Uint32()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		privtest.Skip(t, "cannot make a cgroup: "+err.Error())
	}
	t.Cleanup(func() { os.Remove(dir) })
	var st, own unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		t.Fatal(err)
	}
	selfCg, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Stat(filepath.Join(mnt, snapshot.CgroupPathOf(string(selfCg))), &own); err != nil {
		t.Fatal(err)
	}
	missing := fmt.Sprintf("/dev/nvidia-uvm-cudatrace-test-missing-%08x", rand.Uint32())
	res, rec := traceCmd(t, tracer.Spec{}, fmt.Sprintf(
		"{ true < %s; } 2>/dev/null; echo $$ > %s/cgroup.procs; { true < %s; } 2>/dev/null; exit 0", missing, dir, missing))
	checkComplete(t, res)
	opens := rec.find(byPath(missing))
	if len(opens) != 2 {
		t.Fatalf("%d opens of %s, want 2:\n%s", len(opens), missing, rec.dump())
	}
	if opens[0].CgroupID != own.Ino || opens[1].CgroupID != st.Ino {
		t.Errorf("cgroup ids %d then %d, want %d (cudatrace's) then %d (%s)", opens[0].CgroupID, opens[1].CgroupID, own.Ino, st.Ino, dir)
	}
	if p, err := snapshot.CgroupV2PathByID(opens[1].CgroupID); err != nil || p != "/"+filepath.Base(dir) {
		t.Errorf("the failing call's cgroup after the exit: %q, %v", p, err)
	}
}

// The object for kernels without task storage, bpf_get_current_task_btf or
// attach cookies (5.10: oldkernel_bpfel.o) gives the same events as the
// main one: its slots in hash maps, the current task read by probe reads,
// its functions inlined, a return program per CUDA entry point.
func TestOldKernelObject(t *testing.T) {
	privtest.RequireRoot(t)
	if v := kernelSupport(); v.oldKernel != "" {
		t.Skipf("every trace here loads that object already: this kernel has no %s", v.oldKernel)
	}
	oldKernelObject = true
	t.Cleanup(func() { oldKernelObject = false })
	t.Run("variants", func(t *testing.T) {
		res, _ := traceCmd(t, tracer.Spec{}, "exit 0")
		if !slices.Equal(res.KernelVariants[len(res.KernelVariants)-len(oldKernelVariants):], oldKernelVariants) || res.SyscallHook != hookRawTracepoint {
			t.Errorf("variants %q, hook %s; want the old kernel's and raw tracepoints", res.KernelVariants, res.SyscallHook)
		}
	})
	t.Run("open-ioctl", TestOpenIoctlAndFailures)
	t.Run("library", TestLibraryAndProcOpens)
	t.Run("node-repair", TestNodeRepairCalls)
	t.Run("threads", TestDescendantsAndThreads)
	t.Run("exit-by-leader", TestExitReportedByLeader)
	t.Run("cold-page", TestPathInColdPage)
	t.Run("host-wide", TestHostWideFollowsNVIDIAOpeners)
	t.Run("host-wide-cold-path", TestHostWideFollowsColdPathOpen)
	t.Run("cuda-returns", TestLaunchedTargetLibraryProbed)
	t.Run("count-out", func(t *testing.T) {
		dir := fakelib.Build(t)
		t.Setenv("LD_LIBRARY_PATH", dir)
		_, rec := traceCmd(t, tracer.Spec{}, "FAKELIB_CTL=/dev/null FAKELIB_UVM=/dev/null FAKELIB_DEVICES=2 LD_LIBRARY_PATH="+dir+" exec "+filepath.Join(dir, "app"))
		counts := rec.find(func(e *tracer.Event) bool { return e.Kind == tracer.KindAPI && e.Func == "cuDeviceGetCount" })
		if len(counts) != 1 || counts[0].Out == nil || *counts[0].Out != 2 {
			t.Fatalf("cuDeviceGetCount returns %+v, want one with count 2; events:\n%s", counts, rec.dump())
		}
	})
	t.Run("api-probes", TestPreProbe)
	t.Run("inband", TestInbandFailureNotFolded)
	t.Run("attach", TestAttach)
	t.Run("nothing-left", TestNothingLeftBehind)
}
