package ebpf

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/cudatrace/cudatrace/internal/privtest"
	"github.com/cudatrace/cudatrace/tracer"
)

// blockingSink holds the reader on the first event until release is closed,
// so the ring buffer fills up for certain.
type blockingSink struct {
	recorder
	once    sync.Once
	release chan struct{}
}

func (s *blockingSink) Event(e *tracer.Event) {
	s.once.Do(func() { <-s.release })
	s.recorder.Event(e)
}

// With a one-page ring and a stalled reader, most events are lost, and every
// lost one is counted: captured + dropped is exactly what the target did.
func TestTinyRingCountsEveryDrop(t *testing.T) {
	privtest.RequireRoot(t)
	node := fakeNode(t, "nvidiactl")
	fifo := filepath.Join(t.TempDir(), "done")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	const opens = 3000
	sink := &blockingSink{release: make(chan struct{})}
	go func() {
		// The target writes the fifo after its last open; until then the
		// sink stays blocked.
		os.ReadFile(fifo)
		close(sink.release)
	}()
	res, err := New().Run(privtest.Deadline(t), tracer.Spec{
		Argv:            []string{"/bin/sh", "-c", fmt.Sprintf("i=0; while [ $i -lt %d ]; do : < %s; i=$((i+1)); done; echo done > %s", opens, node, fifo)},
		DeviceMajors:    []uint32{1},
		RingBufferBytes: os.Getpagesize(),
	}, sink)
	if err != nil {
		t.Fatal(err)
	}
	// Ground truth: the opens, plus the exec of sh and its exit.
	const truth = opens + 2
	if res.Dropped == 0 {
		t.Fatalf("no drops with a %d-byte ring and a stalled reader", os.Getpagesize())
	}
	if res.Events+res.Dropped != truth {
		t.Fatalf("events %d + dropped %d = %d, want %d", res.Events, res.Dropped, res.Events+res.Dropped, truth)
	}
	if uint64(len(sink.events)) != res.Events {
		t.Fatalf("sink got %d events, Result.Events %d", len(sink.events), res.Events)
	}
	if len(res.Notes) == 0 || !strings.Contains(res.Notes[0], "dropped") {
		t.Errorf("notes %q do not mention the drops", res.Notes)
	}
	for i, e := range sink.events {
		if e.Seq != uint64(i+1) {
			t.Fatalf("event %d has Seq %d", i, e.Seq)
		}
	}
}

// watchPrograms records the IDs of the programs every Run loads from now on.
// (Other processes on the host may load programs of the same names, so
// names alone cannot tell ours.)
func watchPrograms(t *testing.T) *[]ebpf.ProgramID {
	t.Helper()
	ids := new([]ebpf.ProgramID)
	onLoad = func(c *ebpf.Collection) {
		for name, p := range c.Programs {
			info, err := p.Info()
			if err != nil {
				t.Errorf("info of %s: %v", name, err)
				continue
			}
			id, _ := info.ID()
			*ids = append(*ids, id)
		}
	}
	t.Cleanup(func() { onLoad = nil })
	return ids
}

// stillLoaded returns those of ids the kernel still has loaded. A closed
// BTF tracepoint link frees its program only after an RCU grace period, so
// it looks again for a while before saying one is left.
func stillLoaded(t *testing.T, ids []ebpf.ProgramID) []string {
	t.Helper()
	var found []string
	for range 50 {
		if found = loadedNow(t, ids); len(found) == 0 {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return found
}

// loadedNow walks every program in the kernel and returns those of ids.
func loadedNow(t *testing.T, ids []ebpf.ProgramID) []string {
	t.Helper()
	if len(ids) == 0 {
		t.Fatal("no programs were recorded as loaded")
	}
	ours := map[ebpf.ProgramID]bool{}
	for _, id := range ids {
		ours[id] = true
	}
	var found []string
	id := ebpf.ProgramID(0)
	for {
		var err error
		id, err = ebpf.ProgramGetNextID(id)
		if errors.Is(err, os.ErrNotExist) {
			return found
		}
		if err != nil {
			t.Fatal(err)
		}
		if !ours[id] {
			continue
		}
		name := "?"
		if p, err := ebpf.NewProgramFromID(id); err == nil {
			if info, err := p.Info(); err == nil {
				name = info.Name
			}
			p.Close()
		}
		found = append(found, fmt.Sprintf("%s (id %d)", name, id))
	}
}

// bpfFDs counts our open BPF objects and perf events: a leaked link or
// program keeps one open.
func bpfFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		target, _ := os.Readlink("/proc/self/fd/" + e.Name())
		if strings.HasPrefix(target, "anon_inode:bpf") || strings.HasPrefix(target, "anon_inode:[perf_event]") {
			n++
		}
	}
	return n
}

func tracefsMounts(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), " - tracefs ")
}

// After Run, nothing of ours stays loaded, whether it succeeded or failed
// part-way; and at no point did Run mount tracefs (the BTF tracepoints
// attach through bpf links).
func TestNothingLeftBehind(t *testing.T) {
	privtest.RequireRoot(t)
	ids := watchPrograms(t)
	fdsBefore := bpfFDs(t)
	mountsBefore := tracefsMounts(t)
	mountsWhileTracing := -1
	res, err := New().Run(privtest.Deadline(t), tracer.Spec{Argv: []string{"/bin/sh", "-c", "exit 3"}},
		tracer.SinkFunc(func(*tracer.Event) {
			mountsWhileTracing = max(mountsWhileTracing, tracefsMounts(t))
		}))
	if err != nil {
		t.Fatal(err)
	}
	if res.Exit == nil || res.Exit.Code != 3 || mountsWhileTracing < 0 {
		t.Fatalf("exit %+v, events seen: %v", res.Exit, mountsWhileTracing >= 0)
	}
	if mountsWhileTracing > mountsBefore {
		t.Errorf("%d tracefs mounts while tracing, %d before", mountsWhileTracing, mountsBefore)
	}
	// A Run that fails after loading.
	majors := make([]uint32, 65)
	for i := range majors {
		majors[i] = uint32(i)
	}
	if _, err := New().Run(privtest.Deadline(t), tracer.Spec{Argv: []string{"/bin/true"}, DeviceMajors: majors},
		tracer.SinkFunc(func(*tracer.Event) {})); err == nil || !strings.Contains(err.Error(), "too many device majors") {
		t.Fatalf("err = %v, want too many device majors", err)
	}
	if left := stillLoaded(t, *ids); len(left) > 0 {
		t.Errorf("programs left loaded: %v", left)
	}
	if n := bpfFDs(t); n != fdsBefore {
		t.Errorf("%d BPF/perf fds open after Run, %d before", n, fdsBefore)
	}
	if n := tracefsMounts(t); n > mountsBefore {
		t.Errorf("%d tracefs mounts after Run, %d before", n, mountsBefore)
	}
}

func TestBadSpecs(t *testing.T) {
	privtest.RequireRoot(t)
	sink := tracer.SinkFunc(func(*tracer.Event) {})
	for _, tc := range []struct {
		name string
		spec tracer.Spec
		want string
	}{
		{"nothing to trace", tracer.Spec{}, "exactly one of a command"},
		{"both", tracer.Spec{Argv: []string{"/bin/true"}, PIDs: []int{1}}, "exactly one of a command"},
		{"missing PID", tracer.Spec{PIDs: []int{1 << 30}}, fmt.Sprintf("no such process: %d", 1<<30)},
		{"negative PID", tracer.Spec{PIDs: []int{-4}}, "invalid PID -4"},
		{"ourselves", tracer.Spec{PIDs: []int{os.Getpid()}}, "cannot attach to cudatrace itself"},
		{"ring not a power of two", tracer.Spec{Argv: []string{"/bin/true"}, RingBufferBytes: 3 * 4096}, "power of two"},
		{"ring below a page", tracer.Spec{Argv: []string{"/bin/true"}, RingBufferBytes: 64}, "power of two"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New().Run(privtest.Deadline(t), tc.spec, sink)
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Errorf("err = %v, want one line containing %q", err, tc.want)
			}
		})
	}
}

// Attach to a running process: its calls and its new children's are traced
// until ctx is cancelled; then it is left running, untraced.
func TestAttach(t *testing.T) {
	privtest.RequireRoot(t)
	node := fakeNode(t, "nvidiactl")
	// An NVIDIA-named node whose major (5, the pty multiplexer) is not in
	// the spec's: still listed as held, by its path.
	ptmx := node + "-ptmx"
	if err := unix.Mknod(ptmx, unix.S_IFCHR|0o666, int(unix.Mkdev(5, 2))); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(ptmx)
	target := exec.Command("/bin/sh", "-c", fmt.Sprintf(`exec 7<>%[1]s 8<>%[2]s; while :; do : < %[1]s; sh -c ': < %[1]s'; done`, node, ptmx))
	if err := target.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		target.Process.Kill()
		target.Wait()
	}()
	pid := target.Process.Pid
	ids := watchPrograms(t)
	ctx, cancel := context.WithCancel(privtest.Deadline(t))
	defer cancel()
	rec := &recorder{}
	var fromParent, fromChild int
	res, err := New().Run(ctx, tracer.Spec{PIDs: []int{pid}, DeviceMajors: []uint32{1}},
		tracer.SinkFunc(func(e *tracer.Event) {
			rec.Event(e)
			if e.Path == node && e.PID == pid {
				fromParent++
			} else if e.Path == node {
				fromChild++
			}
			if fromParent >= 3 && fromChild >= 3 {
				cancel()
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	if fromParent < 3 || fromChild < 3 {
		t.Fatalf("opens: %d by the attached shell, %d by its children", fromParent, fromChild)
	}
	if res.Launched || res.Exit != nil {
		t.Errorf("result %+v", res)
	}
	// exec.Command gave the shell /dev/null (c 1:3, a traced major here)
	// as stdin, stdout and stderr.
	want := []string{"attached to running processes: calls made before the attach are not in this trace"}
	for fd := range 3 {
		want = append(want, fmt.Sprintf("fd %d → /dev/null (c 1:3), held before the attach", fd))
	}
	want = append(want,
		fmt.Sprintf("fd 7 → %s (c 1:3), held before the attach", node),
		fmt.Sprintf("fd 8 → %s (c 5:2), held before the attach", ptmx))
	// The loop may be caught mid-redirection: dash opens the node at the
	// lowest free fd (3), saves fd 0 above 9, then dup2s 3 onto 0. Either
	// copy is really held.
	extra := regexp.MustCompile(fmt.Sprintf(`^(fd 3 → %[1]s|fd \d\d+ → (/dev/null|%[1]s)) \(c 1:3\), held before the attach$`, regexp.QuoteMeta(node)))
	for _, n := range res.Notes {
		if !slices.Contains(want, n) && !extra.MatchString(n) {
			t.Errorf("unexpected note %q", n)
		}
	}
	for _, w := range want {
		if !slices.Contains(res.Notes, w) {
			t.Errorf("missing note %q; notes:\n%s", w, strings.Join(res.Notes, "\n"))
		}
	}
	if err := target.Process.Signal(unix.Signal(0)); err != nil {
		t.Fatalf("attached process did not survive the detach: %v", err)
	}
	if left := stillLoaded(t, *ids); len(left) > 0 {
		t.Errorf("programs left loaded after detach: %v", left)
	}
}

// An attach ends by itself once every traced process has exited.
func TestAttachEndsWhenTargetExits(t *testing.T) {
	privtest.RequireRoot(t)
	node := fakeNode(t, "nvidiactl")
	// Paced, so that the ring never fills and the exit event is kept.
	target := exec.Command("/bin/sh", "-c", fmt.Sprintf("while :; do : < %s; sleep 0.01; done", node))
	var stderr strings.Builder
	target.Stderr = &stderr
	if err := target.Start(); err != nil {
		t.Fatal(err)
	}
	defer target.Wait()
	var once sync.Once
	rec := &recorder{}
	// A safety net, not a timing assertion: if Run misses the exit, fail
	// with the events seen rather than hang the suite.
	ctx, cancel := context.WithTimeout(privtest.Deadline(t), 2*time.Minute)
	defer cancel()
	// Kill the target once its calls show the attach is live; Run must
	// then return by itself.
	res, err := New().Run(ctx, tracer.Spec{PIDs: []int{target.Process.Pid}, DeviceMajors: []uint32{1}},
		tracer.SinkFunc(func(e *tracer.Event) {
			rec.Event(e)
			once.Do(func() { target.Process.Signal(unix.SIGTERM) })
		}))
	if err != nil {
		t.Fatal(err)
	}
	if ctx.Err() != nil {
		st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", target.Process.Pid))
		t.Fatalf("Run did not notice the target's exit; target stat %q stderr %q; %d events", st, stderr.String(), len(rec.events))
	}
	ex := one(t, rec, "exit of the attached process", func(e *tracer.Event) bool {
		return e.Kind == tracer.KindExit && e.PID == target.Process.Pid
	})
	if ex.PID != target.Process.Pid || ex.Signal != int(unix.SIGTERM) {
		t.Errorf("exit %+v, want PID %d killed by SIGTERM", *ex, target.Process.Pid)
	}
	checkComplete(t, res)
}

// Even when the exit event itself is lost to a full ring, an attach ends
// once the target is gone, and the loss is reported.
func TestAttachEndsDespiteLostExit(t *testing.T) {
	privtest.RequireRoot(t)
	node := fakeNode(t, "nvidiactl")
	// Opens until SIGUSR1, then a burst of 2000 and exit.
	target := exec.Command("/bin/sh", "-c", fmt.Sprintf(
		`trap 'go=1' USR1; while [ -z "$go" ]; do : < %[1]s; done; i=0; while [ $i -lt 2000 ]; do : < %[1]s; i=$((i+1)); done`, node))
	if err := target.Start(); err != nil {
		t.Fatal(err)
	}
	defer target.Wait()
	pid := target.Process.Pid
	var once sync.Once
	ctx, cancel := context.WithTimeout(privtest.Deadline(t), 2*time.Minute) // safety net only
	defer cancel()
	res, err := New().Run(ctx, tracer.Spec{PIDs: []int{pid}, DeviceMajors: []uint32{1}, RingBufferBytes: os.Getpagesize()},
		tracer.SinkFunc(func(e *tracer.Event) {
			once.Do(func() {
				// Stall the reader until the target is dead: its burst
				// fills the one-page ring, so its exit finds no room.
				target.Process.Signal(unix.SIGUSR1)
				var info unix.Siginfo
				unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
			})
		}))
	if err != nil {
		t.Fatal(err)
	}
	if ctx.Err() != nil {
		t.Fatal("Run did not end after the attached process died")
	}
	if res.Dropped < 1000 {
		t.Errorf("%d drops reported with a stalled reader and a one-page ring, want most of 2000", res.Dropped)
	}
}

// With DeferRelease, Run returns with the trace complete and the links still
// closing; Finish releases everything, and nothing stays behind.
func TestDeferredRelease(t *testing.T) {
	privtest.RequireRoot(t)
	ids := watchPrograms(t)
	fdsBefore := bpfFDs(t)
	var events int
	res, err := New().Run(privtest.Deadline(t), tracer.Spec{Argv: []string{"/bin/sh", "-c", "exit 5"}, DeferRelease: true},
		tracer.SinkFunc(func(*tracer.Event) { events++ }))
	if err != nil {
		t.Fatal(err)
	}
	if res.Finish == nil {
		t.Fatal("DeferRelease: Result.Finish is nil")
	}
	if res.Exit == nil || res.Exit.Code != 5 || uint64(events) != res.Events || events == 0 {
		t.Fatalf("exit %+v, %d events delivered, %d counted", res.Exit, events, res.Events)
	}
	if err := res.Finish(); err != nil {
		t.Fatalf("Finish: %v", err)
	}
	if left := stillLoaded(t, *ids); len(left) > 0 {
		t.Errorf("programs left loaded after Finish: %v", left)
	}
	if n := bpfFDs(t); n != fdsBefore {
		t.Errorf("%d BPF/perf fds open after Finish, %d before", n, fdsBefore)
	}
}
