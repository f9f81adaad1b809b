// Package watch is cudatrace watch: the host-wide trace demultiplexed per
// process. Each followed process gets its own diagnose.Session (the same
// recorder, failure snapshot and analysis as a trace), created at its
// first event and dropped at its exit; a process in which something
// failed and the analysis found why is reported in one line (JSON, or
// readable on a terminal), with its full report kept in --report-dir.
package watch

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cudatrace/cudatrace/analysis"
	"github.com/cudatrace/cudatrace/diagnose"
	"github.com/cudatrace/cudatrace/snapshot"
	"github.com/cudatrace/cudatrace/tracer"
)

// Defaults for Options' bounds.
const (
	// DefaultMaxProcesses bounds the processes followed at once: each
	// holds a recorder of up to DefaultMaxStored events.
	DefaultMaxProcesses = 4096
	// DefaultMaxStored bounds one process's stored events (a torch start
	// stores ~300 once the backend folds repeats).
	DefaultMaxStored = 10_000
	// workers build reports (snapshot wait, analysis, writes) beside the
	// event stream, which must never wait for them; queued is how many
	// finished processes may wait for a worker before the stream does: a
	// burst of that many failures (a fork storm's) is taken without the
	// ring losing events. Each holds its session's memory meanwhile, as
	// each of the MaxProcesses followed does.
	workers = 2
	queued  = DefaultMaxProcesses
)

// Options are one watch's inputs.
type Options struct {
	Backend tracer.Backend
	// Spec carries the backend's settings (DeviceMajors, Fold*After,
	// RingBufferBytes, Duration, Debug); Run sets HostWide and Stats.
	Spec            tracer.Spec
	ProcDevicesPath string
	Version         string
	Host            string
	Filter          Filter
	Verbose         bool      // also print the processes in which nothing failed
	JSON            bool      // JSON lines; otherwise one readable line each
	Out             io.Writer // diagnosis lines
	ReportDir       *ReportDir
	Metrics         *Metrics
	MaxProcesses    int           // 0: DefaultMaxProcesses
	MaxStored       int           // 0: DefaultMaxStored
	DrainTimeout    time.Duration // 0: DefaultDrainTimeout
	// Notice gets one-line notes for the operator (a report not written).
	Notice func(msg string)
	// Debug, when set (watch --debug), gets a line for each process the
	// watch starts to follow, once its identity is read and (the backend
	// probes before it delivers) the library it opened is probed.
	Debug func(msg string)
	// Ready is called once, at the backend's first live statistics: the
	// host is watched from then on (its programs are attached).
	Ready func(tracer.LiveStats)

	// System replaces the live reads and the analysis (tests); identity
	// and now likewise.
	System   *diagnose.System
	identity func(pid int) (snapshot.Identity, error)
	now      func() time.Time
}

// Filter selects the processes watched. A process that does not match is
// not recorded, snapshotted or reported (the backend still follows it: the
// kernel side knows nothing of cgroups' names). The cgroup, container and
// pod filters are decided once, at the process's first event, from its
// cgroup path; --comm is matched at each event until one matches (a
// process's comm changes at exec), and the process is watched from there.
type Filter struct {
	CgroupPrefix string
	Container    string // a container ID or a prefix of it
	PodUID       string
	Comm         string
}

func (f Filter) needsIdentity() bool {
	return f.CgroupPrefix != "" || f.Container != "" || f.PodUID != ""
}

func (f Filter) match(cgroup string, c snapshot.Container) bool {
	switch {
	case f.CgroupPrefix != "" && !cgroupHasPrefix(cgroup, f.CgroupPrefix):
		return false
	case f.Container != "" && (c.ID == "" || !strings.HasPrefix(c.ID, f.Container)):
		return false
	case f.PodUID != "" && c.PodUID != f.PodUID:
		return false
	}
	return true
}

// cgroupHasPrefix matches whole components: /kubepods matches
// /kubepods/besteffort but not /kubepods2.
func cgroupHasPrefix(path, prefix string) bool {
	prefix = strings.TrimSuffix(prefix, "/")
	return prefix == "" || path == prefix || strings.HasPrefix(path, prefix+"/")
}

// Summary counts what a watch saw.
type Summary struct {
	Processes uint64 // processes watched (past the filters and the cap)
	Diagnosed uint64 // lines for failures
	Healthy   uint64 // processes with nothing to report
	Refused   uint64 // processes the MaxProcesses cap turned away
	Filtered  uint64 // processes the filters left out
	Dropped   uint64 // events the backend lost
	// Unfinished are processes still alive at the end in which nothing
	// had failed: neither diagnosed nor counted healthy.
	Unfinished uint64
	// Shed are processes in which something failed that were not
	// diagnosed because the drain after the end (Options.DrainTimeout)
	// ran out: no line.
	Shed uint64
	// Unprinted are healthy processes (among Healthy) that got no line
	// under -v because the diagnosis queue was full.
	Unprinted uint64
	// Incomplete are the lines marked incomplete: their process ran while
	// events were lost, or was first seen before the drop count caught up.
	Incomplete uint64
}

// proc is one followed process's state, from its first event to its exit.
type proc struct {
	pid       int
	sess      *diagnose.Session
	id        snapshot.Identity
	container snapshot.Container // from the cgroup path
	comm      string
	argv      []string // from an exec seen, else /proc at the first event
	argvCut   bool     // argv is the exec event's, not /proc's
	base      time.Duration
	last      time.Duration
	dropped   uint64 // the backend's drop count at the first event
	cudaSeen  bool
	unprobed  bool // a CUDA/NVML library it opened was probed late
	exit      *tracer.ExitStatus
}

// watcher is the sink: it demultiplexes the stream per PID.
type watcher struct {
	o       Options
	start   time.Time
	backend string

	procs map[int]*proc // watched, by PID
	// skip holds processes left out until their exit (filtered, refused),
	// so their events cost a map lookup; bounded like procs.
	skip map[int]struct{}

	jobs chan *proc
	wg   sync.WaitGroup
	// host is read once for many snapshots (the kernel log, the driver).
	host *snapshot.HostCache

	dropped atomic.Uint64
	// dropBase is the drop count at the last statistics sample that
	// showed no new drop (lastSample's count repeated): a loss is counted
	// only at the sample after it, so a process first seen since a rise
	// may have lost its earlier events, and is measured from here.
	dropBase, lastSample atomic.Uint64
	hook                 atomic.Pointer[string]
	ready                sync.Once

	outMu       sync.Mutex
	writeFailed bool
	sum         struct {
		processes, diagnosed, healthy, refused, filtered, unfinished, shed, incomplete, unprinted atomic.Uint64
	}
	// shed is set, and shedding closed, when the drain after the watch's
	// end ran out: the diagnoses still queued, and those of processes the
	// backend still delivers, are counted, not made.
	shed     atomic.Bool
	shedding chan struct{}
	shedOnce sync.Once
}

// DefaultDrainTimeout bounds the diagnoses made after the watch ends
// (SIGTERM, from the signal on: the backend still delivers what the ring
// holds meanwhile): those not made then are counted in Summary.Shed, so
// that watch exits within the DaemonSet's 30 s grace period (the rest is
// for detaching the programs) however long the backlog.
const DefaultDrainTimeout = 20 * time.Second

// Run watches the host until ctx is cancelled or o.Spec.Duration passes,
// then diagnoses the processes that failed and are still running, and
// returns. An error is the backend's (nothing was watched) or a broken
// output.
func Run(ctx context.Context, o Options) (*Summary, error) {
	return newWatcher(o).run(ctx)
}

func newWatcher(o Options) *watcher {
	if o.MaxProcesses <= 0 {
		o.MaxProcesses = DefaultMaxProcesses
	}
	if o.MaxStored <= 0 {
		o.MaxStored = DefaultMaxStored
	}
	if o.identity == nil {
		o.identity = snapshot.TargetIdentity
	}
	if o.now == nil {
		o.now = time.Now
	}
	if o.Notice == nil {
		o.Notice = func(string) {}
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	w := &watcher{
		o: o, start: o.now(), backend: o.Backend.Name(),
		procs: map[int]*proc{}, skip: map[int]struct{}{},
		jobs: make(chan *proc, queued), host: snapshot.NewHostCache(0), shedding: make(chan struct{}),
	}
	empty := ""
	w.hook.Store(&empty)
	if o.Metrics != nil {
		o.Metrics.Backend(w.backend)
	}
	return w
}

func (w *watcher) run(ctx context.Context) (*Summary, error) {
	for range workers {
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			for p := range w.jobs {
				switch {
				case !w.shed.Load():
					w.diagnose(p)
				case p.sess.Triggered():
					w.sum.shed.Add(1)
				default: // -v's healthy line
					w.sum.unprinted.Add(1)
					w.healthy()
				}
			}
		}()
	}
	spec := w.o.Spec
	spec.HostWide = true
	spec.Argv, spec.PIDs, spec.Cred = nil, nil, nil
	spec.Stats = w.liveStats
	// The drain is timed from the end: the cancellation (SIGTERM), or the
	// backend's return (--duration), whichever comes first.
	drain := w.o.DrainTimeout
	if drain <= 0 {
		drain = DefaultDrainTimeout
	}
	var drainOnce sync.Once
	var stopDrain *time.Timer
	startDrain := func() {
		drainOnce.Do(func() { stopDrain = time.AfterFunc(drain, w.startShedding) })
	}
	ended := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			startDrain()
		case <-ended:
		}
	}()
	res, err := w.o.Backend.Run(ctx, spec, w)
	close(ended)
	startDrain()
	defer func() { stopDrain.Stop() }()
	if err == nil {
		w.stats(tracer.LiveStats{Dropped: res.Dropped, SyscallHook: res.SyscallHook})
		w.shutdown(res)
	}
	close(w.jobs)
	w.wg.Wait()
	if w.host != nil { // nil: each snapshot reads the host itself (benchmarks)
		_ = w.host.Close() // read-only: nothing lost
	}
	if d := w.o.ReportDir; d != nil {
		if serr := d.Sync(); serr != nil {
			w.o.Notice(serr.Error())
		}
	}
	if err != nil {
		return nil, err
	}
	if res.Finish != nil {
		if ferr := res.Finish(); ferr != nil {
			w.o.Notice(fmt.Sprintf("cleanup: %v", ferr))
		}
	}
	return w.summary(), nil
}

// startShedding ends the drain: what is still queued or still delivered
// is counted as shed, not diagnosed.
func (w *watcher) startShedding() {
	w.shedOnce.Do(func() {
		w.shed.Store(true)
		close(w.shedding)
	})
}

func (w *watcher) summary() *Summary {
	return &Summary{
		Processes: w.sum.processes.Load(), Diagnosed: w.sum.diagnosed.Load(), Healthy: w.sum.healthy.Load(),
		Refused: w.sum.refused.Load(), Filtered: w.sum.filtered.Load(), Dropped: w.dropped.Load(),
		Unfinished: w.sum.unfinished.Load(), Shed: w.sum.shed.Load(), Incomplete: w.sum.incomplete.Load(),
		Unprinted: w.sum.unprinted.Load(),
	}
}

// stats takes the backend's live counters (from its goroutine).
func (w *watcher) stats(s tracer.LiveStats) {
	if w.lastSample.Swap(s.Dropped) == s.Dropped {
		w.dropBase.Store(s.Dropped) // caught up: no drop since the last sample
	}
	// A final Result's count never goes back below a live one.
	for {
		old := w.dropped.Load()
		if s.Dropped <= old || w.dropped.CompareAndSwap(old, s.Dropped) {
			break
		}
	}
	if s.SyscallHook != "" {
		h := s.SyscallHook
		w.hook.Store(&h)
	}
	if m := w.o.Metrics; m != nil {
		m.live(w.backend, s)
	}
}

// liveStats is Spec.Stats: the counters, and Ready at the first call.
func (w *watcher) liveStats(s tracer.LiveStats) {
	w.stats(s)
	if w.o.Ready != nil {
		w.ready.Do(func() { w.o.Ready(s) })
	}
}

// Event implements tracer.Sink: called by the backend, in order.
func (w *watcher) Event(e *tracer.Event) {
	p := w.procs[e.PID]
	if p == nil {
		p = w.admit(e)
		if m := w.o.Metrics; m != nil {
			m.atLeastFollowed(w.sum.processes.Load() + w.sum.refused.Load() + w.sum.filtered.Load())
		}
		if p == nil {
			if e.Kind == tracer.KindExit {
				delete(w.skip, e.PID)
			}
			return
		}
	}
	ev := *e // shallow: the session copies what it keeps
	ev.Time -= p.base
	p.last = ev.Time
	// The process's name is its leader's: an exit event carries the comm
	// of the thread that ended last (a CUDA worker, "cuda00001400006").
	if e.Comm != "" && (p.comm == "" || e.Kind == tracer.KindExec || (e.TID == e.PID && e.Kind != tracer.KindExit)) {
		p.comm = e.Comm
	}
	p.unprobed = p.unprobed || e.Unprobed
	switch {
	case e.Kind == tracer.KindExec && e.Ret == 0:
		if len(e.Argv) > 0 {
			p.argv, p.argvCut = snapshot.MaskArgv(slices.Clone(e.Argv)), true
		}
	case e.Kind == tracer.KindAPI && !p.cudaSeen && isInit(e.Func):
		p.cudaSeen = true
		if m := w.o.Metrics; m != nil {
			m.cudaStart(e.Ret == 0)
		}
	}
	p.sess.Event(&ev)
	if e.Kind == tracer.KindExec && e.Ret == 0 {
		// The session has just read /proc: the whole argv, where the
		// event's is cut to what the kernel side copies.
		if a := p.sess.Argv(e.PID); len(a) > 0 {
			p.argv, p.argvCut = snapshot.MaskArgv(slices.Clone(a)), false
		}
	}
	if e.Kind == tracer.KindExit {
		p.exit = &tracer.ExitStatus{Code: e.ExitCode, Signal: e.Signal}
		delete(w.procs, e.PID)
		w.finish(p)
	}
}

// Folded implements tracer.FoldSink.
func (w *watcher) Folded(pid int, folded []tracer.Folded) {
	if p := w.procs[pid]; p != nil {
		p.sess.Folded(folded)
	}
}

func isInit(fn string) bool { return fn == "cuInit" || strings.HasPrefix(fn, "nvmlInit") }

// admit creates pid's state at its first event, or leaves it out (nil):
// the filters and the cap are applied before any snapshot work.
func (w *watcher) admit(e *tracer.Event) *proc {
	if _, ok := w.skip[e.PID]; ok || e.Kind == tracer.KindExit {
		return nil // an exit with nothing before it: nothing to diagnose
	}
	f := w.o.Filter
	if f.Comm != "" && e.Comm != f.Comm {
		return nil // perhaps at a later exec
	}
	if len(w.procs) >= w.o.MaxProcesses {
		w.sum.refused.Add(1)
		if m := w.o.Metrics; m != nil {
			m.refused.Inc()
		}
		w.leaveOut(e.PID)
		return nil
	}
	id, err := w.o.identity(e.PID)
	if err != nil && f.needsIdentity() {
		// Gone already, or unreadable: it cannot be shown to match.
		w.sum.filtered.Add(1)
		w.leaveOut(e.PID)
		return nil
	}
	ct := snapshot.ContainerFromCgroupPath(id.Cgroup)
	if !f.match(id.Cgroup, ct) {
		w.sum.filtered.Add(1)
		w.leaveOut(e.PID)
		return nil
	}
	w.sum.processes.Add(1)
	so := diagnose.SessionOptions{ProcDevicesPath: w.o.ProcDevicesPath, MaxStored: w.o.MaxStored, System: w.o.System, Host: w.host}
	if err == nil {
		// A snapshot that finds it gone reads its cgroup's policy from this.
		id.PID = e.PID
		so.Identity = &id
	}
	p := &proc{
		pid: e.PID, id: id, container: ct, argv: id.Argv, base: e.Time, dropped: w.dropBase.Load(),
		sess: diagnose.NewSession(so),
	}
	w.procs[e.PID] = p
	if w.o.Debug != nil {
		what := "its identity read"
		if err != nil {
			what = fmt.Sprintf("its identity unread (%v)", err)
		}
		w.o.Debug(fmt.Sprintf("PID %d (%s): followed from its %s event; %s", e.PID, analysis.Printable(e.Comm), e.Kind, what))
	}
	return p
}

// maxLeftOut bounds the PIDs remembered as left out (a map entry each, a
// few MiB at most): its own bound, not MaxProcesses, since a storm that
// fills the cap has more processes refused than followed, and each one
// forgotten is refused (and counted) again at its next event.
const maxLeftOut = 1 << 16

// leaveOut remembers pid as left out until its exit, while there is room;
// past that its next event is judged again (the cap counts it again).
func (w *watcher) leaveOut(pid int) {
	if len(w.skip) < max(w.o.MaxProcesses, maxLeftOut) {
		w.skip[pid] = struct{}{}
	}
}

// finish hands a process that has ended (or outlived the watch) to the
// workers, or, when nothing failed in it, just counts it. The rule when
// the workers fall behind (docs/watch.md, "Bounds"): a process in which
// nothing failed (queued only under -v) is counted healthy without a line
// when the queue is full; one in which something failed waits for room,
// so the event stream waits (what the ring then loses is counted, and
// marks the lines incomplete), until the drain after the end runs out,
// when it is counted as shed.
func (w *watcher) finish(p *proc) {
	if !p.sess.Triggered() {
		if w.o.Verbose {
			select {
			case w.jobs <- p:
				return
			default:
				w.sum.unprinted.Add(1)
			}
		}
		w.healthy()
		return
	}
	w.queue(p)
}

// queue hands p to the workers, or counts it shed once the drain ran out.
func (w *watcher) queue(p *proc) {
	if w.shed.Load() {
		w.sum.shed.Add(1)
		return
	}
	select {
	case w.jobs <- p:
	case <-w.shedding:
		w.sum.shed.Add(1)
	}
}

func (w *watcher) healthy() {
	w.sum.healthy.Add(1)
	if m := w.o.Metrics; m != nil {
		m.healthy.Inc()
	}
}

// shutdown ends the processes still followed when the backend returned:
// those in which something failed are diagnosed as they are now.
func (w *watcher) shutdown(res *tracer.Result) {
	byPID := map[int][]tracer.Folded{}
	for _, f := range res.Folded {
		if w.procs[f.PID] != nil {
			byPID[f.PID] = append(byPID[f.PID], f)
		}
	}
	for pid, p := range w.procs {
		delete(w.procs, pid)
		if !p.sess.Triggered() {
			w.sum.unfinished.Add(1)
			continue
		}
		p.sess.Folded(byPID[pid])
		w.queue(p)
	}
}

// diagnose builds p's report and emits its line (a worker).
func (w *watcher) diagnose(p *proc) {
	dropped := w.dropped.Load() - p.dropped
	res := &tracer.Result{
		Backend: w.backend, SyscallHook: *w.hook.Load(),
		Started: w.start.Add(p.base), Ended: w.start.Add(p.base + p.last),
		Dropped: dropped, Exit: p.exit,
		// The host-wide eBPF trace probes every CUDA/NVML library a
		// followed process opens, but does not stop the process for it:
		// one probed after its open may have returned before.
		APIReturns: w.backend == "ebpf" && !p.unprobed,
		Notes:      []string{"cudatrace watch: followed from its first NVIDIA device or CUDA/NVML library open"},
	}
	if p.unprobed {
		res.Notes = append(res.Notes, "a CUDA/NVML library was probed only after this process opened it: its first return codes may be missing")
	}
	if dropped > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("%d events were lost host-wide while this process ran: its trace may be incomplete", dropped))
	}
	rep := p.sess.Report(tracer.Spec{PIDs: []int{p.pid}}, res, res.Started, w.o.Version)
	rep.Target.Argv = p.argv
	l := newLine(w.o.Host, p, rep, w.o.now())
	if l.UID >= 0 {
		// The target's, as the line says: no launch credentials here.
		rep.Target.UID, rep.Target.User = int(l.UID), l.User
	}
	if l.Cause == "" && !w.o.Verbose {
		w.healthy()
		return
	}
	if l.Cause == "" {
		w.healthy()
	} else {
		w.sum.diagnosed.Add(1)
		if m := w.o.Metrics; m != nil {
			m.diagnosis(l.Cause, l.Runtime)
		}
		if d := w.o.ReportDir; d != nil {
			path, err := d.Save(l.ReportID, rep)
			if err != nil {
				w.o.Notice(fmt.Sprintf("report %s not kept: %v", l.ReportID, err))
			} else {
				l.Report = path
			}
		}
	}
	if l.Incomplete {
		w.sum.incomplete.Add(1)
	}
	w.outMu.Lock()
	defer w.outMu.Unlock()
	if err := writeLine(w.o.Out, l, w.o.JSON); err != nil && !w.writeFailed {
		w.writeFailed = true // said once: a closed pipe fails every line
		w.o.Notice(fmt.Sprintf("write: %v", err))
	}
}
