package diagnose

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cudatrace/cudatrace/analysis"
	"github.com/cudatrace/cudatrace/snapshot"
	"github.com/cudatrace/cudatrace/tracer"
)

// holdingBackend delivers each event as the ptrace backend does: Event,
// then, for a failed call, Stopped while the thread is held; once resumed,
// the process exits at once (gone).
type holdingBackend struct {
	events []tracer.Event
	hold   []time.Duration // each Stopped's allowance, by event (the last repeats)
	gone   func(pid int)
	held   []time.Duration // how long each Stopped kept the thread
	done   chan struct{}   // non-nil: closed after the last event
}

func (*holdingBackend) Name() string { return "ptrace" }

func (b *holdingBackend) Run(_ context.Context, _ tracer.Spec, sink tracer.Sink) (*tracer.Result, error) {
	ss, ok := sink.(tracer.StopSink)
	for i := range b.events {
		e := b.events[i].Copy()
		e.Seq = uint64(i + 1)
		sink.Event(&e)
		if ok && e.Failed() {
			start := time.Now()
			ss.Stopped(&e, start.Add(b.hold[min(i, len(b.hold)-1)]))
			b.held = append(b.held, time.Since(start))
		}
		b.gone(e.PID)
	}
	if b.done != nil {
		close(b.done)
	}
	return &tracer.Result{Backend: "ptrace", Launched: true}, nil
}

// exitingSystem is a system whose processes exit when the backend resumes
// them; reading a view takes a while (or blocks until released).
type exitingSystem struct {
	mu      sync.Mutex
	gone    map[int]bool
	views   []int // PIDs whose view was read
	hosts   []int // PIDs whose snapshot got the host's facts
	read    time.Duration
	release chan struct{} // non-nil: a view read waits for it
}

func (s *exitingSystem) exit(pid int) {
	s.mu.Lock()
	s.gone[pid] = true
	s.mu.Unlock()
}

func (s *exitingSystem) deps() *deps {
	return &deps{
		collectView: func(o snapshot.Options) *snapshot.Snapshot {
			if s.release != nil {
				<-s.release
			}
			time.Sleep(s.read)
			s.mu.Lock()
			defer s.mu.Unlock()
			s.views = append(s.views, o.PID)
			// As Collect: whether the target lived through the reads
			// is known at their end.
			snap := &snapshot.Snapshot{Process: snapshot.Process{PID: o.PID}, TargetLost: s.gone[o.PID]}
			if !s.gone[o.PID] {
				snap.Process.Comm = "target"
			}
			return snap
		},
		addHost: func(snap *snapshot.Snapshot, o snapshot.Options) {
			s.mu.Lock()
			s.hosts = append(s.hosts, snap.Process.PID)
			s.mu.Unlock()
			snap.Host.Kernel = "host-facts"
		},
		targetEnv: func(int) (map[string]string, error) { return nil, nil },
		analyze:   analysis.AnalyzeFacts,
	}
}

func traceHeld(t *testing.T, sys *exitingSystem, b *holdingBackend) *reportAndRelease {
	t.Helper()
	b.gone = sys.exit
	o := Options{Spec: tracer.Spec{Argv: []string{"/bin/app"}}, Backend: b, Version: "v-test", deps: sys.deps()}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rep, release, err := Trace(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	return &reportAndRelease{rep, release}
}

// A target that exits as soon as its failing open returns: held there, its
// own view is read before it goes, and that snapshot is the report's.
func TestHeldTargetIsReadBeforeItExits(t *testing.T) {
	sys := &exitingSystem{gone: map[int]bool{}, read: 50 * time.Millisecond}
	b := &holdingBackend{hold: []time.Duration{time.Minute}, events: []tracer.Event{
		{PID: 50, Kind: tracer.KindOpen, Syscall: "openat", Path: "/dev/nvidia-uvm", Ret: -1},
	}}
	got := traceHeld(t, sys, b)
	if !slices.Equal(sys.views, []int{50}) {
		t.Fatalf("views read of PIDs %v, want only 50's, at its failure (an exit snapshot means the hold did not wait)", sys.views)
	}
	if s := got.rep.Snapshot; s.Process.PID != 50 || s.Process.Comm != "target" || s.Host.Kernel != "host-facts" {
		t.Errorf("report snapshot %+v, want PID 50's own view, completed with the host's facts", s.Process)
	}
	if !slices.Equal(sys.hosts, []int{50}) {
		t.Errorf("host facts added to %v, want once, to 50's snapshot", sys.hosts)
	}
}

// A view read that stalls (a hostile target's files) keeps the thread no
// longer than the deadline; a failed call that triggered no read is not
// held at all.
func TestHoldEndsAtTheDeadline(t *testing.T) {
	sys := &exitingSystem{gone: map[int]bool{}, release: make(chan struct{})}
	b := &holdingBackend{hold: []time.Duration{100 * time.Millisecond, 20 * time.Second}, done: make(chan struct{}), events: []tracer.Event{
		{PID: 60, Kind: tracer.KindOpen, Syscall: "openat", Path: "/dev/nvidia-uvm", Ret: -1}, // triggers
		{PID: 61, Kind: tracer.KindOpen, Syscall: "openat", Path: "/dev/nvidia0", Ret: -1},    // after the strong one: no read
	}}
	got := make(chan *reportAndRelease)
	go func() { got <- traceHeld(t, sys, b) }()
	// The stalled read is released only once the backend has been through
	// both holds: the first must give up at its deadline, the second not
	// wait at all (it would wait its 20 s).
	<-b.done
	close(sys.release)
	rep := (<-got).rep
	if len(b.held) != 2 {
		t.Fatalf("%d holds, want 2", len(b.held))
	}
	if b.held[0] < 100*time.Millisecond {
		t.Errorf("the stalled read held the thread only %v, less than its deadline", b.held[0])
	}
	if b.held[1] >= 10*time.Second {
		t.Errorf("a failed call that triggered no read was held %v", b.held[1])
	}
	// Resumed at the deadline, PID 60 exited before its read ended: the
	// exit snapshot stands in.
	if s := rep.Snapshot; s.Process.Comm != "" {
		t.Errorf("snapshot %+v: the held target's read outlasted it, so it must not be kept", s.Process)
	}
}
