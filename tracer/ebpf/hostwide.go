package ebpf

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cilium/ebpf"

	"github.com/cudatrace/cudatrace/snapshot"
	"github.com/cudatrace/cudatrace/tracer"
)

// A host-wide trace (cudatrace watch) has no target of its own: the kernel
// adds to the filter any process whose open names something of NVIDIA's
// (watch_follows in bpf/cudatrace.c), its children follow it there, and its
// exit takes it out. User space keeps nothing per process but the set of
// those it has seen, for the live counters.

// statsInterval is how often Spec.Stats is called.
const statsInterval = time.Second

// runHostWide traces until ctx is cancelled or spec.Duration passes.
func (s *session) runHostWide(ctx context.Context, spec tracer.Spec, res *tracer.Result, live *liveSet) error {
	if err := s.attach(); err != nil {
		return err
	}
	// The host's own copies, as its loader would pick them; a container's
	// copy is probed at its first open (the process is not stopped for
	// it: the event says so).
	s.api.AttachLibs(snapshot.OpenCUDALibraries("/", ""))
	s.phases.mark("attached")
	var timeout <-chan time.Time
	if spec.Duration > 0 {
		t := time.NewTimer(spec.Duration)
		defer t.Stop()
		timeout = t.C
	}
	tick := time.NewTicker(statsInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timeout:
			res.Notes = append(res.Notes, fmt.Sprintf("host-wide trace stopped after %v", spec.Duration))
			return nil
		case <-s.exits:
		case <-tick.C:
			if spec.Stats != nil {
				spec.Stats(s.liveStats(live))
			}
		}
	}
}

// liveStats reads the counters of a running host-wide trace. Processes
// whose exit event was lost (a full ring) left the filter in the kernel
// all the same: they are forgotten here too.
func (s *session) liveStats(live *liveSet) tracer.LiveStats {
	traced := s.coll.Maps[bpfMapTraced]
	live.prune(func(pid int) bool {
		var v uint8
		return traced.Lookup(uint32(pid), &v) == nil
	})
	st := tracer.LiveStats{SyscallHook: s.hook}
	st.Following, st.Followed = live.counts()
	if byReason, err := s.drops(); err == nil {
		for _, n := range byReason {
			st.Dropped += n
		}
	}
	st.Dropped += live.undecodable()
	return st
}

// liveSet is the processes a host-wide trace follows now, as user space
// has seen them: added at their first event, removed at their exit.
type liveSet struct {
	mu       sync.Mutex
	pids     map[int]struct{}
	followed uint64
	bad      func() uint64 // the pump's undecodable count
}

func newLiveSet() *liveSet { return &liveSet{pids: make(map[int]struct{})} }

func (l *liveSet) seen(pid int, exited bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, known := l.pids[pid]
	switch {
	case exited:
		delete(l.pids, pid)
		if !known {
			l.followed++ // its only event was its exit
		}
	case !known:
		l.pids[pid] = struct{}{}
		l.followed++
	}
}

func (l *liveSet) prune(inFilter func(pid int) bool) {
	l.mu.Lock()
	pids := make([]int, 0, len(l.pids))
	for pid := range l.pids {
		pids = append(pids, pid)
	}
	l.mu.Unlock()
	for _, pid := range pids {
		if !inFilter(pid) {
			l.mu.Lock()
			delete(l.pids, pid)
			l.mu.Unlock()
		}
	}
}

func (l *liveSet) counts() (following int, followed uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.pids), l.followed
}

func (l *liveSet) undecodable() uint64 {
	if l.bad == nil {
		return 0
	}
	return l.bad()
}

// foldedFor takes one process's counts out of the fold maps (at its exit
// in a host-wide trace), so the maps hold only live processes' sites
// however long the trace runs. A PID reused within the moment between the
// exit and this sweep could lose its first counts to it: the new process
// would have to open an NVIDIA file within that window.
func (s *session) foldedFor(pid int) []tracer.Folded {
	var out []tracer.Folded
	sweep(s.coll.Maps[bpfMapIoctlSites], s.fold.ioctls, pid, func(k bpfIoctlSite) uint32 { return k.Tgid },
		func(site bpfIoctlSite, n uint64) {
			f := ioctlFolded(site)
			f.Count = n
			out = append(out, f)
		})
	sweep(s.coll.Maps[bpfMapCallSites], s.fold.calls, pid, func(k bpfCallSite) uint32 { return k.Tgid },
		func(site bpfCallSite, n uint64) {
			if f, err := callFolded(site); err == nil { // an unknown kind: not one of ours to report
				f.Count = n
				out = append(out, f)
			}
		})
	return out
}

// sweep deletes pid's sites from one fold map, passing on those counted
// past the threshold with the number not delivered. The map holds every
// live process's sites and is swept at each exit: it is read in batches
// (a few syscalls, where an iteration takes two per entry: a fork storm
// of processes that open a node spent most of watch's CPU there), or by
// iteration where the kernel has no batch lookup.
func sweep[K any](sites *ebpf.Map, after uint32, pid int, tgid func(K) uint32, add func(K, uint64)) {
	if after == 0 {
		return
	}
	var mine []K
	each := func(site K, n uint64) {
		if int(tgid(site)) != pid {
			return
		}
		mine = append(mine, site)
		if n > uint64(after) {
			add(site, n-uint64(after))
		}
	}
	if !sweepBatches(sites, each) {
		var (
			site K
			n    uint64
		)
		it := sites.Iterate()
		for it.Next(&site, &n) {
			each(site, n)
		}
	}
	for _, k := range mine {
		_ = sites.Delete(k) // gone already: nothing to free
	}
}

// sweepBatch is how many sites one batch lookup reads.
const sweepBatch = 256

// sweepBatches feeds every entry of sites to each through batch lookups;
// false where the kernel has none (nothing was fed then).
func sweepBatches[K any](sites *ebpf.Map, each func(K, uint64)) bool {
	var cursor ebpf.MapBatchCursor
	keys, vals := make([]K, sweepBatch), make([]uint64, sweepBatch)
	for first := true; ; first = false {
		n, err := sites.BatchLookup(&cursor, keys, vals, nil)
		for i := range n {
			each(keys[i], vals[i])
		}
		switch {
		case errors.Is(err, ebpf.ErrKeyNotExist):
			return true // the end
		case err != nil && first && n == 0:
			return false // no batch lookup here (before 5.6): iterate
		case err != nil:
			return true // as an iteration cut short by a change of the map
		}
	}
}
