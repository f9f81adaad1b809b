package ptrace

import (
	"fmt"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cudatrace/cudatrace/nvdev/nvfile"
	"github.com/cudatrace/cudatrace/snapshot"
	"github.com/cudatrace/cudatrace/tracer"
	"github.com/cudatrace/cudatrace/tracer/uprobe"
)

// CUDA's own return codes come from the eBPF backend's uretprobes on
// libcuda and libnvidia-ml (loaded through package uprobe, which the eBPF
// backend registers with when linked in), where the privileges allow them (root, or
// CAP_BPF+CAP_PERFMON). The tracer thread owns them: it puts each traced
// process in their filter as it appears, probes a library opened from
// anywhere at the open's exit stop (the opener waits, stopped, so no
// kernel-side hold is needed), and drains their events before it handles
// each stop. An api event recorded before a stop thus reaches the Sink
// before that stop's own event, in one sequence, from one goroutine.

// apiUnknownNote starts the one line saying why the codes are missing.
const apiUnknownNote = "CUDA's return code is unknown: "

// startAPI loads the probes and puts them on the libraries the processes
// pids have loaded (their mappings, and the loader's choice for a later
// dlopen). Without the probes the trace goes on, with res saying why.
func (s *session) startAPI(res *tracer.Result, pids []int) {
	p, err := uprobe.Start(s.start)
	if !s.useAPI(res, p, err) {
		return
	}
	for _, pid := range pids {
		p.AttachLibs(snapshot.OpenMappedLibraries(pid))
		p.AttachLibs(snapshot.OpenCUDALibraries(fmt.Sprintf("/proc/%d/root", pid), uprobe.TargetLibraryPath(pid)))
	}
}

// startAPIProbes is uprobe.Start; tests slow it down.
var startAPIProbes = uprobe.Start

// apiLoad is the outcome of a background load of the probes.
type apiLoad struct {
	p   uprobe.API
	err error
}

// apiLoadAfter is how long a launched target runs before its probes load
// in the background. Loading them beside its start (feature probes, the
// object, maps, programs: ~15 ms of wall time in all here, with the kernel
// types cached) doubled a short target's start-up and run under ptrace
// (issue 31): one that exits sooner, having opened no CUDA library, costs
// no load at all, as before ptrace had probes.
const apiLoadAfter = 25 * time.Millisecond

// apiLaunch is a launched target's probe load: begun after apiLoadAfter,
// or at once by a library's open, whichever comes first; at most once.
type apiLaunch struct {
	once  sync.Once
	timer *time.Timer
	done  chan apiLoad // the outcome, once begun
	libs  []*snapshot.LibFile
	start time.Time
}

// begin starts the load, unless it began already or was given up.
func (l *apiLaunch) begin() {
	l.once.Do(func() {
		go func() {
			p, err := startAPIProbes(l.start)
			if err != nil {
				snapshot.CloseAll(l.libs)
			} else {
				// From here, not at the loop's next stop: a target that is
				// running then may stop next only at its open of the library
				// under another name, too late to probe it. Its processes join
				// the probes' filter at the loop's next stop, which comes before
				// any open of it completes (every open stops at its entry).
				p.PreProbe(l.libs)
			}
			l.done <- apiLoad{p, err}
		}()
	})
}

// giveUp stops a load that has not begun; false: it has.
func (l *apiLaunch) giveUp() bool {
	l.timer.Stop()
	gaveUp := false
	l.once.Do(func() {
		gaveUp = true
		snapshot.CloseAll(l.libs)
	})
	return gaveUp
}

// startAPILaunch arranges the probes' load for a launched target, with the
// files its loader would pick, opened now in its root. Once installed,
// those are probed in the background after a while, and a library opened
// before that at its open's exit stop, where the opener waits: a short
// target costs no uprobe (each link's close waits for a grace period).
func (s *session) startAPILaunch(res *tracer.Result, pid int) {
	// Said now, not by the load: a trace that ends first does not wait
	// for it (abandonAPI), and must still say why codes are missing.
	if err := uprobe.Allowed(); err != nil {
		s.useAPI(res, nil, err)
		return
	}
	libs := snapshot.OpenCUDALibraries(fmt.Sprintf("/proc/%d/root", pid), os.Getenv("LD_LIBRARY_PATH"))
	s.awaited = map[[2]uint64]bool{}
	for _, l := range libs {
		var st unix.Stat_t
		if unix.Fstat(int(l.File.Fd()), &st) == nil {
			s.awaited[[2]uint64{st.Dev, st.Ino}] = true
		}
	}
	l := &apiLaunch{done: make(chan apiLoad, 1), libs: libs, start: s.start}
	l.timer = time.AfterFunc(apiLoadAfter, l.begin)
	s.apiLoading = l
	s.apiRes = res
}

// installAPI takes the probes loaded in the background, once they are
// ready, or (wait) begins the load if need be and waits for it.
func (s *session) installAPI(wait bool) {
	if s.apiLoading == nil {
		return
	}
	var l apiLoad
	if wait {
		s.apiLoading.begin()
		l = <-s.apiLoading.done
	} else {
		select {
		case l = <-s.apiLoading.done:
		default:
			return
		}
	}
	s.apiLoading = nil
	s.useAPI(s.apiRes, l.p, l.err)
}

// useAPI makes p the session's probes, with every process traced so far in
// their filter; false (res saying why) when they could not load.
func (s *session) useAPI(res *tracer.Result, p uprobe.API, err error) bool {
	if err != nil {
		res.Notes = append(res.Notes, apiUnknownNote+"its uprobes could not be loaded: "+err.Error())
		return false
	}
	s.api = p
	for _, t := range s.tasks {
		s.traceAPI(t.tgid)
	}
	for tgid := range s.zombieLeaders {
		s.traceAPI(tgid)
	}
	if onAPIStarted != nil {
		onAPIStarted()
	}
	return true
}

// onAPIStarted lets tests know when the probes are on.
var onAPIStarted func()

// traceAPI puts a new task's process in the probes' filter, before the
// task runs (again, for a thread: a map update costs less than knowing).
func (s *session) traceAPI(tgid int) {
	if s.api == nil {
		return
	}
	if err := s.api.Trace(tgid); err != nil {
		s.apiErr = fmt.Sprintf("process %d could not be added to the uprobes' filter: %v", tgid, err)
	}
}

// untraceAPI takes a process that exited out of the filter (its PID may
// be reused by a process that is not ours).
func (s *session) untraceAPI(tgid int) {
	if s.api != nil {
		s.api.Untrace(tgid)
	}
}

// openedAPI probes a CUDA or NVML library the stopped task just opened,
// unless that file is probed already: one named as such, or one of the
// files the background probing is for under any name (a symlink), known
// by its inode, so that an open that comes before that probing (a loaded
// host's background load can take longer than the target's start) is
// probed all the same.
func (s *session) openedAPI(t *task, c *call, ret int64) {
	if ret < 0 || c.ev.Kind != tracer.KindOpen {
		return
	}
	if awaited := c.fileOK && s.awaited[c.file]; awaited {
		delete(s.awaited, c.file) // probed below, once
	} else if !nvfile.IsLibrary(c.ev.Path) {
		return
	}
	s.installAPI(true) // nothing can call into it until it is probed
	if s.api == nil {
		return
	}
	s.api.AttachOpened(t.tid, int(ret), c.ev.Path)
}

// drainAPI delivers the api events recorded so far.
func (s *session) drainAPI() {
	if s.api == nil {
		return
	}
	s.api.Drain(func(e *tracer.Event) {
		if e.Kind != tracer.KindEnv { // never recorded: no place in the order
			s.seq++
			e.Seq = s.seq
		}
		s.sink.Event(e)
	})
}

// finishAPI delivers what is left, says what was probed and detaches.
func (s *session) finishAPI(res *tracer.Result) {
	s.installAPI(false)
	if s.apiLoading != nil {
		s.abandonAPI(res)
		return
	}
	if s.api == nil {
		return
	}
	s.drainAPI()
	res.APIReturns = true
	res.APILibraries = s.api.Libraries()
	res.Notes = append(res.Notes, s.api.Notes()...)
	if s.apiErr != "" {
		res.Notes = append(res.Notes, s.apiErr+"; its CUDA calls are missing")
	}
	if lost := s.api.Lost(); lost > 0 {
		res.Dropped += lost
		res.Notes = append(res.Notes, fmt.Sprintf("%d returns of CUDA/NVML entry points were lost (ring buffer full); the trace is incomplete", lost))
	}
	s.api.Close()
	s.api = nil
}

// abandonAPI ends a trace whose probes are not loaded yet. None of its
// processes can have called CUDA: every open of a CUDA library, or of a
// file the background probing is for, waits at its exit stop until the
// probes are on (openedAPI), and none did. So the trace saw every CUDA
// return there was (none), and neither loads the probes nor waits for a
// load under way (a short target's whole run, issue 31): that one closes
// itself once done.
func (s *session) abandonAPI(res *tracer.Result) {
	l := s.apiLoading
	s.apiLoading = nil
	if !l.giveUp() {
		go func() {
			if r := <-l.done; r.p != nil {
				r.p.Close()
			}
		}()
	}
	res.APIReturns = true
}
