package ptrace

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cudatrace/cudatrace/internal/fakelib"
	"github.com/cudatrace/cudatrace/internal/privtest"
	"github.com/cudatrace/cudatrace/tracer"
	_ "github.com/cudatrace/cudatrace/tracer/ebpf" // registers the uprobes' loader
	"github.com/cudatrace/cudatrace/tracer/uprobe"
)

// bpfFDs counts this process's BPF objects and perf events: a probe left
// attached keeps one open.
func bpfFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		l, _ := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		if strings.HasPrefix(l, "anon_inode:bpf") || l == "anon_inode:[perf_event]" {
			n++
		}
	}
	return n
}

// checkOrder: Seq unique and increasing across both sources.
func checkOrder(t *testing.T, all []tracer.Event) {
	t.Helper()
	// The environment copies (KindEnv) are never recorded, and take no
	// place in the order.
	evs := slices.DeleteFunc(slices.Clone(all), func(e tracer.Event) bool { return e.Kind == tracer.KindEnv })
	for i := 1; i < len(evs); i++ {
		if evs[i].Seq != evs[i-1].Seq+1 {
			dump(t, evs)
			t.Fatalf("event %d has seq %d after %d", i, evs[i].Seq, evs[i-1].Seq)
		}
	}
}

// A launched program's CUDA calls, made in a library it dlopens by a path
// no search path names: probed at the open's exit, their codes, the count
// and the order relative to the syscalls inside cuInit are all recorded.
func TestLaunchAPIReturns(t *testing.T) {
	privtest.RequireRoot(t)
	dir := fakelib.Build(t)
	other := t.TempDir()
	lib := filepath.Join(other, "libcuda.so.1")
	b, err := os.ReadFile(filepath.Join(dir, "libcuda.so.1"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(lib, b, 0o755); err != nil {
		t.Fatal(err)
	}
	before := bpfFDs(t)
	res, c, _ := runLaunch(t, []string{"/usr/bin/env", "FAKELIB_CTL=/dev/null", "FAKELIB_UVM=/dev/null", "FAKELIB_DEVICES=2",
		filepath.Join(dir, "app"), lib}, []uint32{1})
	evs := c.all()
	checkOrder(t, evs)
	if res.Exit == nil || res.Exit.Code != 0 || !res.APIReturns || !slices.Contains(res.APILibraries, lib) {
		t.Fatalf("result %+v", res)
	}
	api := c.where(func(e *tracer.Event) bool { return e.Kind == tracer.KindAPI })
	var names []string
	for _, e := range api {
		names = append(names, e.Func)
		if e.Ret != 0 || e.Path != lib || e.Comm != "app" || e.PID != e.TID {
			t.Errorf("api event %+v", e)
		}
	}
	if !slices.Equal(names, []string{"cuInit", "cuDeviceGetCount", "cuDevicePrimaryCtxRetain"}) {
		dump(t, evs)
		t.Fatalf("api events %v", names)
	}
	if api[1].Out == nil || *api[1].Out != 2 {
		t.Errorf("cuDeviceGetCount out %v", api[1].Out)
	}
	// cuInit's two opens of /dev/null come before its return, the exit after.
	opens := c.where(func(e *tracer.Event) bool {
		return e.Kind == tracer.KindOpen && e.Path == "/dev/null" && e.PID == api[0].PID
	})
	exit := c.where(func(e *tracer.Event) bool { return e.Kind == tracer.KindExit && e.PID == api[0].PID })
	if len(opens) != 2 || opens[1].Seq > api[0].Seq || len(exit) != 1 || exit[0].Seq < api[2].Seq || api[0].Time < opens[1].Time {
		dump(t, evs)
		t.Errorf("opens %+v exit %+v", opens, exit)
	}
	if after := bpfFDs(t); after != before {
		t.Errorf("%d BPF/perf fds open after the run, %d before: probes left attached", after, before)
	}
}

// Attached to a process that loaded libcuda already: the probes go on the
// mapped file, and its later cuInit failure is recorded.
func TestAttachAPIReturns(t *testing.T) {
	privtest.RequireRoot(t)
	dir := fakelib.Build(t)
	cmd := exec.Command(filepath.Join(dir, "app"))
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+dir, "FAKELIB_WAIT=1", "FAKELIB_CTL=/dev/null", "FAKELIB_UVM=/nonexistent")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	waitMapped(t, cmd.Process.Pid, "libcuda.so.1")
	started := make(chan struct{})
	onAPIStarted = func() { close(started) }
	defer func() { onAPIStarted = nil }()
	type ran struct {
		res *tracer.Result
		err error
	}
	done := make(chan ran, 1)
	c := &collector{}
	go func() {
		res, err := New().Run(privtest.Deadline(t), tracer.Spec{PIDs: []int{cmd.Process.Pid}}, c)
		done <- ran{res, err}
	}()
	select {
	case <-started:
	case r := <-done:
		t.Fatalf("Run ended before its probes were on: %+v %v", r.res, r.err)
	}
	stdin.Write([]byte("go\n"))
	r := <-done
	cmd.Wait()
	if r.err != nil {
		t.Fatal(r.err)
	}
	api := c.where(func(e *tracer.Event) bool { return e.Kind == tracer.KindAPI })
	if len(api) != 1 || api[0].Func != "cuInit" || api[0].Ret != 999 || api[0].PID != cmd.Process.Pid ||
		!r.res.APIReturns || !slices.Contains(r.res.APILibraries, filepath.Join(dir, "libcuda.so.1")) {
		dump(t, c.all())
		t.Fatalf("api events %+v, result %+v", api, r.res)
	}
	// The failing return sent its process's environment, once.
	env := c.where(func(e *tracer.Event) bool { return e.Kind == tracer.KindEnv })
	if len(env) != 1 || env[0].PID != cmd.Process.Pid || !strings.Contains(string(env[0].Env), "PATH=") {
		t.Errorf("environment copies %+v, want one of PID %d", env, cmd.Process.Pid)
	}
	checkOrder(t, c.all())
}

// waitMapped waits until pid has mapped a file named name.
func waitMapped(t *testing.T, pid int, name string) {
	t.Helper()
	ctx := privtest.Deadline(t)
	for {
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/maps")
		if strings.Contains(string(b), "/"+name) {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("process %d never mapped %s", pid, name)
		default:
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A launched target's loader-path libcuda is probed however the target
// names it (here a symlink whose name is not libcuda's): in the background
// by its inode, or, opened before that probing is done (at once, or on a
// loaded host whose background load takes longer than the target's
// start), at its open's exit stop, known by its inode. Before, an alias
// opened first went unprobed: cuInit's return was missing, as the load's
// speed decided.
func TestLaunchLibraryProbedUnderAnotherName(t *testing.T) {
	privtest.RequireRoot(t)
	dir := fakelib.Build(t)
	t.Setenv("LD_LIBRARY_PATH", dir) // cudatrace's, where it looks for the loader's choice
	alias := filepath.Join(t.TempDir(), "libgpu-runtime.so")
	if err := os.Symlink(filepath.Join(dir, "libcuda.so.1"), alias); err != nil {
		t.Fatal(err)
	}
	for _, delay := range []string{"0", "0.3"} {
		t.Run("after="+delay, func(t *testing.T) {
			script := "sleep " + delay + "; LD_LIBRARY_PATH=" + dir + " exec " + filepath.Join(dir, "app") + " " + alias
			res, c, _ := runLaunch(t, []string{"/bin/sh", "-c", script}, []uint32{1})
			inits := c.where(func(e *tracer.Event) bool { return e.Kind == tracer.KindAPI && e.Func == "cuInit" })
			if len(inits) != 1 || res.Exit == nil || res.Exit.Code != 0 {
				dump(t, c.all())
				t.Fatalf("cuInit returns %+v, result %+v", inits, res)
			}
		})
	}
}

// A target that exits before the probes have loaded opened no CUDA library
// (such an open waits for them): the trace ends without waiting for the
// load, says CUDA's returns were seen (none), and the load, once done,
// leaves nothing attached. The target outlives apiLoadAfter, so the load
// has begun; it is held until the trace has ended.
func TestLaunchEndsBeforeAPILoad(t *testing.T) {
	privtest.RequireRoot(t)
	release, loaded := make(chan struct{}), make(chan error, 1)
	startAPIProbes = func(start time.Time) (uprobe.API, error) {
		<-release
		p, err := uprobe.Start(start)
		loaded <- err
		return p, err
	}
	defer func() { startAPIProbes = uprobe.Start }()
	before := bpfFDs(t)
	res, _, _ := runLaunch(t, []string{"/bin/sleep", "0.1"}, []uint32{1})
	if res.Exit == nil || res.Exit.Code != 0 || !res.APIReturns || len(res.APILibraries) != 0 {
		t.Fatalf("result %+v", res)
	}
	close(release)
	if err := <-loaded; err != nil {
		t.Fatal(err)
	}
	waitBPFFDs(t, before)
}

// A target gone sooner than apiLoadAfter makes no load at all (where the
// host is slow enough for one to begin, it is closed all the same).
func TestLaunchShortTargetLoadsNoProbes(t *testing.T) {
	privtest.RequireRoot(t)
	var began atomic.Int32
	startAPIProbes = func(start time.Time) (uprobe.API, error) {
		began.Add(1)
		return uprobe.Start(start)
	}
	defer func() { startAPIProbes = uprobe.Start }()
	before := bpfFDs(t)
	res, _, _ := runLaunch(t, []string{"/bin/true"}, []uint32{1})
	if res.Exit == nil || res.Exit.Code != 0 || !res.APIReturns {
		t.Fatalf("result %+v", res)
	}
	t.Logf("loads begun: %d", began.Load())
	waitBPFFDs(t, before)
}

// waitBPFFDs waits until this process holds want BPF/perf fds again.
func waitBPFFDs(t *testing.T, want int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for bpfFDs(t) != want {
		if time.Now().After(deadline) {
			t.Fatalf("%d BPF/perf fds open after the trace, %d before", bpfFDs(t), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
