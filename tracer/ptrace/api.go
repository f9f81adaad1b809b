package ptrace

import (
	"fmt"
	"os"

	"github.com/cudatrace/cudatrace/nvdev"
	"github.com/cudatrace/cudatrace/snapshot"
	"github.com/cudatrace/cudatrace/tracer"
	"github.com/cudatrace/cudatrace/tracer/ebpf"
)

// CUDA's own return codes come from the eBPF backend's uretprobes on
// libcuda and libnvidia-ml, where the privileges allow them (root, or
// CAP_BPF+CAP_PERFMON). The tracer thread owns them: it puts each traced
// process in their filter as it appears, probes a library opened from
// anywhere at the open's exit stop (the opener waits, stopped, so no
// kernel-side hold is needed), and drains their events before it handles
// each stop. An api event recorded before a stop thus reaches the Sink
// before that stop's own event, in one sequence, from one goroutine.

// apiUnknownNote starts the one line saying why the codes are missing.
const apiUnknownNote = "CUDA's return code is unknown: "

// startAPI loads the probes and, attaching, puts them on the libraries the
// processes pids have loaded (their mappings, and the loader's choice for a
// later dlopen). A launched target's libraries are probed in the background
// once it has run for a while, and any opened before then at that open's
// exit stop, where it waits anyway: a short target costs no uprobe (each
// link's close waits for a grace period). Without the probes the trace goes
// on, with res saying why.
func (s *session) startAPI(res *tracer.Result, pids []int, launched bool) {
	p, err := ebpf.StartAPIProbes(s.start)
	if err != nil {
		res.Notes = append(res.Notes, apiUnknownNote+"its uprobes could not be loaded: "+err.Error())
		return
	}
	s.api = p
	for _, t := range s.tasks {
		s.traceAPI(t.tgid)
	}
	for tgid := range s.zombieLeaders {
		s.traceAPI(tgid)
	}
	for _, pid := range pids {
		root := fmt.Sprintf("/proc/%d/root", pid)
		if launched {
			p.PreProbe(snapshot.OpenCUDALibraries(root, os.Getenv("LD_LIBRARY_PATH")))
			continue
		}
		p.AttachLibs(snapshot.OpenMappedLibraries(pid))
		p.AttachLibs(snapshot.OpenCUDALibraries(root, ebpf.TargetLibraryPath(pid)))
	}
	if onAPIStarted != nil {
		onAPIStarted()
	}
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
// unless that file is probed already.
func (s *session) openedAPI(t *task, c *call, ret int64) {
	if s.api == nil || ret < 0 || c.ev.Kind != tracer.KindOpen || !nvdev.IsLibrary(c.ev.Path) {
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
		s.seq++
		e.Seq = s.seq
		s.sink.Event(e)
	})
}

// finishAPI delivers what is left, says what was probed and detaches.
func (s *session) finishAPI(res *tracer.Result) {
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
