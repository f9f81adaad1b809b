package watch

import (
	"bytes"
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/cudatrace/cudatrace/diagnose"
	"github.com/cudatrace/cudatrace/internal/privtest"
	"github.com/cudatrace/cudatrace/snapshot"
	"github.com/cudatrace/cudatrace/tracer"
)

// failures is n processes from pid on, each denied nvidiactl and exited.
func failures(h *fakeHost, pid, n int) []tracer.Event {
	var events []tracer.Event
	for p := pid; p < pid+n; p++ {
		h.cgroups[p] = "/"
		events = append(events, append(deniedCtl(p, "job"), exitOf(p, 1))...)
	}
	return events
}

// Every snapshot of a watch reads the host's facts through one HostCache
// (issue 32 item 4: a fork storm's snapshots each read the whole kernel
// log and the driver's files, a third of watch's CPU).
func TestSnapshotsShareHostCache(t *testing.T) {
	h := &fakeHost{cgroups: map[int]string{}}
	events := failures(h, 100, 3)
	var mu sync.Mutex
	hosts := map[*snapshot.HostCache]int{}
	_, sum, _ := watchWith(t, &fakeBackend{events: events}, h, func(o *Options) {
		collect := o.System.Collect
		o.System.Collect = func(so snapshot.Options) *snapshot.Snapshot {
			mu.Lock()
			hosts[so.Host]++
			mu.Unlock()
			return collect(so)
		}
	})
	if sum.Diagnosed != 3 || len(hosts) != 1 || hosts[nil] != 0 {
		t.Errorf("%d diagnosed; the snapshots' host caches %v: want 3, all through one", sum.Diagnosed, hosts)
	}
}

// The kept reports are made durable together: one syncfs for the
// directory's file system, not two fsyncs per report; the watch's end
// syncs what is still pending.
func TestReportDirSyncsOnce(t *testing.T) {
	dir := t.TempDir()
	rd, err := OpenReportDir(dir, 10)
	if err != nil {
		t.Fatal(err)
	}
	syncs := 0
	rd.syncEvery = time.Hour // only the end's
	rd.syncfs = func(int) error { syncs++; return nil }
	h := &fakeHost{cgroups: map[int]string{}}
	_, sum, out := watchWith(t, &fakeBackend{events: failures(h, 200, 4)}, h, func(o *Options) { o.ReportDir = rd })
	names, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	if sum.Diagnosed != 4 || len(names) != 4 || len(parseLines(t, out)) != 4 {
		t.Fatalf("%d diagnosed, %d reports kept: want 4 of each", sum.Diagnosed, len(names))
	}
	if syncs != 1 {
		t.Errorf("%d syncs of the report directory's file system for 4 reports, want 1 (at the end)", syncs)
	}
}

// burstBackend delivers its events at once, after the watch was
// cancelled where cancelled is set (the ring's backlog read after
// SIGTERM), then calls after.
type burstBackend struct {
	events    []tracer.Event
	cancelled bool
	after     func()
}

func (b *burstBackend) Name() string { return "ebpf" }

func (b *burstBackend) Run(ctx context.Context, _ tracer.Spec, sink tracer.Sink) (*tracer.Result, error) {
	if b.cancelled {
		<-ctx.Done()
	}
	for i := range b.events {
		e := b.events[i].Copy()
		e.Seq, e.Time = uint64(i+1), time.Duration(i+1)*time.Millisecond
		sink.Event(&e)
	}
	b.after()
	return &tracer.Result{Backend: "ebpf"}, nil
}

// stalled is h's system with every snapshot held until release closes:
// the workers fall behind.
func stalled(h *fakeHost, release chan struct{}) *diagnose.System {
	sys := h.system()
	collect := sys.Collect
	sys.Collect = func(o snapshot.Options) *snapshot.Snapshot {
		<-release
		return collect(o)
	}
	return sys
}

// The drain after the end is timed from the cancellation (SIGTERM), not
// from the backend's return: the backend still delivers the ring's
// backlog then, and each failure of it waited for room in a full queue,
// so a 30,000-process storm's SIGTERM took 71 s against the 20 s drain
// (scripts/bench/watch-storm.sh, TERM_AT_END=1). Past the drain, the
// failures still delivered are counted as shed, not waited for.
func TestDrainTimedFromCancel(t *testing.T) {
	h := &fakeHost{cgroups: map[int]string{}}
	const n = queued + workers + 40
	release := make(chan struct{})
	b := &burstBackend{events: failures(h, 1000, n), cancelled: true, after: func() { close(release) }}
	ctx, cancel := context.WithCancel(privtest.Deadline(t))
	cancel()
	var out bytes.Buffer
	w := newWatcher(Options{Backend: b, Out: &out, JSON: true, System: stalled(h, release), identity: h.identity,
		DrainTimeout: time.Millisecond})
	sum, err := w.run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Shed < n-queued-workers || sum.Diagnosed+sum.Shed != n || len(parseLines(t, out.String())) != int(sum.Diagnosed) {
		t.Errorf("%d diagnosed, %d shed of %d: want at least %d shed (past the queue), and every one counted once", sum.Diagnosed, sum.Shed, n, n-queued-workers)
	}
}

// Under -v a process in which nothing failed never makes the event stream
// wait: past a full queue it is counted healthy without its line, and the
// summary says how many.
func TestVerboseHealthyShedWhenQueueFull(t *testing.T) {
	h := &fakeHost{cgroups: map[int]string{}}
	const n = queued + workers + 40
	var events []tracer.Event
	for p := 2000; p < 2000+n; p++ {
		h.cgroups[p] = "/"
		events = append(events, tracer.Event{PID: p, TID: p, Comm: "job", Kind: tracer.KindOpen, Syscall: "openat", Path: "/dev/nvidiactl", Ret: 3, Dev: ctlDev},
			exitOf(p, 0))
	}
	release := make(chan struct{})
	b := &burstBackend{events: events, after: func() { close(release) }}
	var out bytes.Buffer
	w := newWatcher(Options{Backend: b, Out: &out, JSON: true, Verbose: true, System: stalled(h, release), identity: h.identity})
	sum, err := w.run(privtest.Deadline(t))
	if err != nil {
		t.Fatal(err)
	}
	lines := parseLines(t, out.String())
	if sum.Healthy != n || sum.Unprinted < n-queued-workers || uint64(len(lines))+sum.Unprinted != n || sum.Shed != 0 {
		t.Errorf("%d healthy, %d lines, %d unprinted, %d shed: want %d healthy, at least %d unprinted, the rest printed, none shed",
			sum.Healthy, len(lines), sum.Unprinted, sum.Shed, n, n-queued-workers)
	}
}
