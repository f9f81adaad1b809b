package ebpf

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cudatrace/cudatrace/internal/privtest"
	"github.com/cudatrace/cudatrace/tracer"
)

// foldRecorder is a FoldSink that keeps events and, per process, the folded
// counts and whether they came before its exit event.
type foldRecorder struct {
	recorder
	fmu         sync.Mutex
	folded      map[int][]tracer.Folded
	exited      map[int]bool
	foldedAfter []int // processes whose counts came after their exit
}

func (r *foldRecorder) Event(e *tracer.Event) {
	if e.Kind == tracer.KindExit {
		r.fmu.Lock()
		r.exited[e.PID] = true
		r.fmu.Unlock()
	}
	r.recorder.Event(e)
}

func (r *foldRecorder) Folded(pid int, f []tracer.Folded) {
	r.fmu.Lock()
	defer r.fmu.Unlock()
	if r.exited[pid] {
		r.foldedAfter = append(r.foldedAfter, pid)
	}
	r.folded[pid] = append(r.folded[pid], f...)
}

// A host-wide trace follows exactly the processes that open something of
// NVIDIA's (a node, a library by name), and their children from then on;
// not a neighbour, not cudatrace itself. Each followed process's folded
// counts arrive before its exit, and delivered plus folded is what it did.
func TestHostWideFollowsNVIDIAOpeners(t *testing.T) {
	privtest.RequireRoot(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	node := fmt.Sprintf("/dev/nvidia-hostwide-cudatrace-test-%08x", rand.Uint32())
	if err := unix.Mknod(node, unix.S_IFCHR|0o666, int(unix.Mkdev(1, 9))); err != nil {
		t.Fatalf("mknod %s: %v", node, err)
	}
	t.Cleanup(func() { os.Remove(node) })
	lib := filepath.Join(t.TempDir(), "libcuda.so.1")
	if err := os.WriteFile(lib, []byte("not an ELF file"), 0o644); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(privtest.Deadline(t))
	defer cancel()
	stats := make(chan tracer.LiveStats, 64)
	rec := &foldRecorder{folded: map[int][]tracer.Folded{}, exited: map[int]bool{}}
	const ioctlsAfter, callsAfter = 8, 32
	type result struct {
		res *tracer.Result
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := New().Run(ctx, tracer.Spec{
			HostWide:        true,
			DeviceMajors:    []uint32{1},
			FoldIoctlsAfter: ioctlsAfter,
			FoldCallsAfter:  callsAfter,
			Stats: func(s tracer.LiveStats) {
				select {
				case stats <- s:
				default:
				}
			},
		}, rec)
		done <- result{res, err}
	}()
	// The first live counters come once the programs are attached.
	select {
	case <-stats:
	case r := <-done:
		t.Fatalf("Run returned before tracing: %v", r.err)
	case <-ctx.Done():
		t.Fatal("no live counters before the deadline")
	}

	run := func(name string, args ...string) int {
		t.Helper()
		cmd := exec.CommandContext(ctx, name, args...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
		return cmd.Process.Pid
	}
	// cudatrace's own process opens the node: never followed.
	if fd, err := unix.Open(node, unix.O_RDONLY, 0); err == nil {
		unix.Close(fd)
	}
	neighbour := run("/bin/sh", "-c", "cat /etc/hostname >/dev/null")
	repeater := run(self, helperArg, "repeat", node)
	libOpener := run("/bin/cat", lib)
	// The child runs a copy of true under a name of its own: other tests
	// may run followed processes at the same time.
	child := filepath.Join(t.TempDir(), "true-hostwide")
	if data, err := os.ReadFile("/bin/true"); err != nil || os.WriteFile(child, data, 0o755) != nil {
		t.Fatalf("copy /bin/true: %v", err)
	}
	parent := run("/bin/sh", "-c", fmt.Sprintf(": < %s; %s; exit 0", node, child))

	// Wait until the followed processes' exits are in (other tests may run
	// processes that are followed too: the counters alone do not say),
	// then stop.
	exitsOf := func(pids ...int) bool {
		for _, pid := range pids {
			if len(rec.find(func(e *tracer.Event) bool { return e.PID == pid && e.Kind == tracer.KindExit })) == 0 {
				return false
			}
		}
		return true
	}
	var last tracer.LiveStats
	for !exitsOf(repeater, libOpener, parent) || len(rec.find(func(e *tracer.Event) bool {
		return e.PID != parent && e.Kind == tracer.KindExit && e.Comm == "true-hostwide"
	})) == 0 {
		select {
		case last = <-stats:
		case <-ctx.Done():
			t.Fatalf("the followed processes' exits did not arrive\n%s", rec.dump())
		}
	}
	// The counters queued so far may predate the exits: read on until a
	// round has seen them all.
	for last.Followed < 4 {
		select {
		case last = <-stats:
		case <-ctx.Done():
			t.Fatalf("live stats never counted the 4 followed processes: last %+v", last)
		}
	}
	if last.SyscallHook == "" {
		t.Errorf("live stats: %+v, want a syscall hook", last)
	}
	cancel()
	r := <-done
	if r.err != nil {
		t.Fatalf("Run: %v", r.err)
	}
	if r.res.Dropped != 0 {
		t.Errorf("%d events dropped", r.res.Dropped)
	}

	of := func(pid int) []*tracer.Event {
		return rec.find(func(e *tracer.Event) bool { return e.PID == pid })
	}
	if got := of(os.Getpid()); len(got) != 0 {
		t.Errorf("cudatrace's own process was followed: %d events, first %+v", len(got), *got[0])
	}
	if got := of(neighbour); len(got) != 0 {
		t.Errorf("a neighbour that opened nothing of NVIDIA's was followed: %+v", *got[0])
	}

	// The repeater: 4 threads × 50 rounds of open, a successful ioctl, a
	// failing one.
	const total = foldThreads * foldRounds
	var opens, okIoctls, badIoctls uint64
	for _, e := range of(repeater) {
		switch {
		case e.Kind == tracer.KindOpen && e.Path == node:
			opens++
		case e.Kind == tracer.KindIoctl && e.Request == rndGetEntCnt && !e.Failed():
			okIoctls++
		case e.Kind == tracer.KindIoctl && e.Failed():
			badIoctls++
		}
	}
	if opens != callsAfter || okIoctls != ioctlsAfter || badIoctls != total {
		t.Errorf("repeater delivered %d opens, %d good and %d failing ioctls; want %d, %d, %d", opens, okIoctls, badIoctls, callsAfter, ioctlsAfter, total)
	}
	rec.fmu.Lock()
	for _, f := range rec.folded[repeater] {
		switch f.Kind {
		case tracer.KindOpen:
			opens += f.Count
		case tracer.KindIoctl:
			okIoctls += f.Count
		}
	}
	after := rec.foldedAfter
	rec.fmu.Unlock()
	if opens != total || okIoctls != total {
		t.Errorf("delivered + folded: %d opens, %d good ioctls; the repeater made %d of each", opens, okIoctls, total)
	}
	if len(after) != 0 {
		t.Errorf("folded counts came after the exit of %v", after)
	}

	// A library opened by name, not yet probed: followed, and the event
	// says its calls may have run unprobed.
	libOpens := rec.find(func(e *tracer.Event) bool { return e.PID == libOpener && e.Kind == tracer.KindOpen && e.Path == lib })
	if len(libOpens) != 1 || !libOpens[0].Unprobed {
		t.Errorf("open of %s by PID %d: %d events (want 1, marked unprobed)\n%s", lib, libOpener, len(libOpens), rec.dump())
	}

	// The shell that opened the node is followed, and so is the child it
	// started afterwards.
	if len(rec.find(func(e *tracer.Event) bool { return e.PID == parent && e.Kind == tracer.KindOpen && e.Path == node })) != 1 {
		t.Errorf("the shell's open of the node is missing")
	}
	if len(rec.find(func(e *tracer.Event) bool {
		return e.PID != parent && e.Kind == tracer.KindExec && e.Path == child
	})) != 1 {
		t.Errorf("the followed shell's child was not followed (no exec of its own copy of true)\n%s", rec.dump())
	}
	for _, pid := range []int{repeater, libOpener, parent} {
		if len(rec.find(func(e *tracer.Event) bool { return e.PID == pid && e.Kind == tracer.KindExit })) != 1 {
			t.Errorf("PID %d: no exit event", pid)
		}
	}
}

// A process whose NVIDIA open passes a path in a page it never touched
// (the entry program cannot read it) is followed all the same, decided at
// the open's exit; a cold open of anything else is not followed (issue 32
// item 5).
func TestHostWideFollowsColdPathOpen(t *testing.T) {
	privtest.RequireRoot(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	node := fmt.Sprintf("/dev/nvidia-coldpath-cudatrace-test-%08x", rand.Uint32())
	if err := unix.Mknod(node, unix.S_IFCHR|0o666, int(unix.Mkdev(1, 9))); err != nil {
		t.Fatalf("mknod %s: %v", node, err)
	}
	t.Cleanup(func() { os.Remove(node) })
	other := filepath.Join(t.TempDir(), "not-nvidia")
	if err := os.WriteFile(other, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(privtest.Deadline(t))
	defer cancel()
	stats := make(chan tracer.LiveStats, 64)
	rec := &recorder{}
	done := make(chan error, 1)
	go func() {
		_, err := New().Run(ctx, tracer.Spec{
			HostWide: true, DeviceMajors: []uint32{1},
			Stats: func(s tracer.LiveStats) {
				select {
				case stats <- s:
				default:
				}
			},
		}, rec)
		done <- err
	}()
	select {
	case <-stats:
	case err := <-done:
		t.Fatalf("Run returned before tracing: %v", err)
	case <-ctx.Done():
		t.Fatal("no live counters before the deadline")
	}
	run := func(args ...string) int {
		t.Helper()
		cmd := exec.CommandContext(ctx, self, args...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
		return cmd.Process.Pid
	}
	notFollowed := run(helperArg, "cold-open", other)
	followed := run(helperArg, "cold-open", node)
	// A warm open after both, always followed: the ring buffer is in the
	// order its events were reserved, so once this one's exit is in, all
	// the cold openers did is too.
	marker := run(helperArg, "open-ioctl", node)
	for len(rec.find(func(e *tracer.Event) bool { return e.PID == marker && e.Kind == tracer.KindExit })) == 0 {
		select {
		case <-stats:
		case <-ctx.Done():
			t.Fatalf("the marker's exit did not arrive\n%s", rec.dump())
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if got := rec.find(func(e *tracer.Event) bool {
		return e.PID == followed && e.Kind == tracer.KindOpen && e.Path == node && !e.Failed()
	}); len(got) != 1 {
		t.Errorf("the cold open of %s: %d events, want 1\n%s", node, len(got), rec.dump())
	}
	if got := rec.find(func(e *tracer.Event) bool { return e.PID == notFollowed }); len(got) != 0 {
		t.Errorf("a cold open of another file was followed: %+v", *got[0])
	}
}
