package diagnose

import (
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cudatrace/cudatrace/snapshot"
	"github.com/cudatrace/cudatrace/tracer"
)

// failureSnapshot takes the system snapshot at the first failed device
// open, while the failing process still exists. It runs beside the event
// stream so the tracer never stalls. An earlier, weaker trigger (a failed
// ioctl, a non-device open: a container runtime's setup can make those
// before the target's cgroup is in place) is replaced by the first failed
// open of an NVIDIA node. So at most two snapshots are read per trace.
//
// The target's own view is read first and the host's facts after it; a
// backend that holds the failing thread stopped (tracer.StopSink) waits in
// held for the first part, so a process that exits right after its failing
// call is still there to be read.
type failureSnapshot struct {
	opts   snapshot.Options
	mu     sync.Mutex
	closed bool
	strong bool // a failed NVIDIA open triggered it
	wg     sync.WaitGroup
	snap   *snapshot.Snapshot
	gen    int
	// env is the failing process's environment, read at once: a process
	// that exits right after CUDA fails outlives the first reads, not the
	// whole snapshot, and CUDA_VISIBLE_DEVICES may be the cause.
	env map[string]string
	// pid is the process of the latest trigger, whose environment env
	// holds when the read came in time.
	pid int
	// container is the failing process's container, read at once for the
	// same reason: the fix is written in that runtime's syntax.
	container snapshot.Container
	// viewSeq is the event whose trigger is reading the target's view;
	// viewDone is closed once that read ends.
	viewSeq  uint64
	viewDone chan struct{}
	// ids are the traced processes' identities, by PID (at most
	// maxIdentities): a snapshot that finds its process gone reads that
	// process's cgroups from its own (snapshot.Options.Identity).
	ids map[int]*snapshot.Identity
	// failEnv are the environments the kernel side copied at a failing
	// entry point, by PID (tracer.KindEnv): preferred to any read of /proc.
	failEnv map[int]map[string]string

	deps deps // the system reads
}

// cudaFailed notes CUDA's failure code: compute mode (46) and the fabric
// manager (802) are asked of nvidia-smi, which takes a second or more and
// so is asked only then.
func (f *failureSnapshot) cudaFailed(code int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if code == 46 || code == 802 {
		f.opts.NvidiaSMI = "auto" // nvidia-smi is not a traced child
	}
}

// maxIdentities bounds the processes of one trace whose identity is kept.
const maxIdentities = 64

// setIdentity keeps id as its process's latest identity, while there is
// room (a process already kept is always updated).
func (f *failureSnapshot) setIdentity(id *snapshot.Identity) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.setIdentityLocked(id)
}

func (f *failureSnapshot) setIdentityLocked(id *snapshot.Identity) {
	if f.ids == nil {
		f.ids = map[int]*snapshot.Identity{}
	}
	if _, ok := f.ids[id.PID]; ok || len(f.ids) < maxIdentities {
		f.ids[id.PID] = id
	}
}

// setEnv keeps the environment the kernel side copied at process pid's
// failing entry point: its environment at the failure, where the reads of
// /proc may have come after it exited. A cut copy that lacks a variable an
// earlier read found keeps that read's.
func (f *failureSnapshot) setEnv(pid int, env map[string]string, cut bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if old := f.ids[pid]; cut && old != nil && old.Env != nil {
		merged := maps.Clone(old.Env)
		maps.Copy(merged, env)
		env = merged
	}
	if env == nil {
		env = map[string]string{} // read, and none of the kept variables set
	}
	if f.failEnv == nil {
		f.failEnv = map[int]map[string]string{}
	}
	if _, ok := f.failEnv[pid]; ok || len(f.failEnv) < maxIdentities {
		f.failEnv[pid] = env
	}
}

// identity is process pid's latest identity, or nil.
func (f *failureSnapshot) identity(pid int) *snapshot.Identity {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ids[pid]
}

func (f *failureSnapshot) options() snapshot.Options {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.opts
}

func (f *failureSnapshot) trigger(e *tracer.Event, path string) { f.triggerAs(e, path, false) }

func (f *failureSnapshot) triggerAs(e *tracer.Event, path string, strong bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed || f.strong || (f.gen > 0 && !strong) {
		return
	}
	pid := e.PID
	f.strong = strong
	f.gen++
	gen := f.gen
	f.pid, f.env = pid, nil
	if env, err := f.deps.targetEnv(pid); err == nil {
		f.env = env
	}
	if f.deps.targetContainer != nil {
		if ct, ok := f.deps.targetContainer(pid); ok {
			f.container = ct
		} else if ct, ok := f.ids[pid].Container(); ok && f.container.Runtime == "" {
			// Gone already: its cgroups as read at its first event or
			// exec still name its container.
			f.container = ct
		}
	}
	// Its cgroups and UID now, in case it is gone before its view is
	// read (a zombie still shows them); what a zombie no longer shows
	// (argv, its root) or a read cut short missed comes from an earlier
	// read of the same process.
	read := false
	if f.deps.targetIdentity != nil {
		if id, err := f.deps.targetIdentity(pid); err == nil {
			read = true
			id.PID = pid
			if old := f.ids[pid]; old != nil {
				if len(id.Argv) == 0 {
					id.Argv = old.Argv
				}
				if id.UID < 0 {
					id.UID = old.UID // reaped between the reads
				}
				if !id.RootKnown {
					id.SameRoot, id.RootKnown = old.SameRoot, old.RootKnown
				}
			}
			f.setIdentityLocked(&id)
		}
	}
	if !read && e.CgroupID != 0 && f.deps.cgroupPath != nil {
		// Gone already (an event read after the process exited): the
		// cgroup the kernel recorded at the call names its policy, even
		// where no read of its /proc came in time.
		if p, err := f.deps.cgroupPath(e.CgroupID); err == nil {
			id := snapshot.Identity{PID: pid, UID: -1}
			if old := f.ids[pid]; old != nil {
				id = *old
			}
			id = id.InCgroupV2(p)
			f.setIdentityLocked(&id)
		}
	}
	opts := f.opts
	opts.PID = pid
	opts.Identity = f.ids[pid]
	if path != "" {
		opts.ExtraPaths = []string{path} // described even if it is missing
	}
	viewDone := make(chan struct{})
	f.viewSeq, f.viewDone = e.Seq, viewDone
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		snap := f.deps.collectView(opts)
		close(viewDone) // a held target may go on now
		// A target that exited while it was being read leaves a snapshot
		// that is part its view, part cudatrace's (mounts or cgroups
		// lost on the way): drop it, and the exit snapshot is taken
		// instead.
		if snap.TargetLost {
			snap = nil
		} else {
			f.deps.addHost(snap, opts)
		}
		f.mu.Lock()
		if gen == f.gen {
			f.snap = snap
		}
		f.mu.Unlock()
	}()
}

// held is called while the backend holds e's thread stopped at the exit of
// its failed call: if e triggered a snapshot, it waits (until deadline at
// most) for the read of that process's own view.
func (f *failureSnapshot) held(e *tracer.Event, deadline time.Time) {
	f.mu.Lock()
	done := f.viewDone
	if done == nil || f.viewSeq != e.Seq {
		f.mu.Unlock()
		return
	}
	f.viewDone = nil // one wait per trigger
	f.mu.Unlock()
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

func (f *failureSnapshot) wait() *snapshot.Snapshot {
	f.mu.Lock()
	f.closed = true // no trigger after this point
	f.mu.Unlock()
	f.wg.Wait()
	return f.snap
}

// fillEnv gives a snapshot the failing process's environment as the kernel
// side copied it at the failure (tracer.KindEnv), where there is one; else,
// to a snapshot taken when its process was gone, the environment read at
// the failure; or, where the failing process had
// exited before that read (a CUDA call's failure arrives from its return
// probe, often after the process printed it and exited), the one read at
// its open of libcuda or its last exec, or at pid's.
func (f *failureSnapshot) fillEnv(s *snapshot.Snapshot, pid int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	who := f.pid // the failing process's, whoever's view this is
	if who == 0 {
		who = pid
	}
	filled := false
	if env, ok := f.failEnv[who]; ok {
		s.Env, filled = env, true
	} else if s.Env == nil {
		switch {
		case f.env != nil:
			s.Env = f.env
		case f.pid != 0 && f.ids[f.pid] != nil && f.ids[f.pid].Env != nil:
			s.Env = f.ids[f.pid].Env
		case f.ids[pid] != nil && f.ids[pid].Env != nil:
			s.Env = f.ids[pid].Env
		}
		filled = s.Env != nil
	}
	if filled {
		// Not unavailable, only read earlier (or in the kernel).
		s.Unavailable = slices.DeleteFunc(s.Unavailable, func(u string) bool { return strings.HasPrefix(u, "target environment") })
	}
	if s.Container.Runtime == "" && f.container.Runtime != "" {
		s.Container = f.container
	}
}
