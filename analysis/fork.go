package analysis

import (
	"fmt"
	"sort"

	"github.com/cudatrace/cudatrace/nvdev"
	"github.com/cudatrace/cudatrace/nvdev/nvfile"
	"github.com/cudatrace/cudatrace/tracer"
)

// forkFacts are what the fork rule asks of each process, read in one pass
// over the trace (a log may hold 200k processes: no scan per process).
type forkFacts struct {
	procs  map[int]*procFork
	inits  []int // indexes of successful cuInit returns, in trace order
	events []tracer.Event
}

type procFork struct {
	first    int  // index of its first event
	ownImage bool // it made a successful exec or opened a CUDA library itself
	api      bool // a CUDA or NVML return of its own was traced
}

func (a *analyzer) forkFacts() *forkFacts {
	f := &forkFacts{procs: map[int]*procFork{}, events: a.ev}
	for i := range a.ev {
		e := &a.ev[i]
		p := f.procs[e.PID]
		if p == nil {
			p = &procFork{first: i}
			f.procs[e.PID] = p
		}
		if !e.Failed() && (e.Kind == tracer.KindExec || (e.Kind == tracer.KindOpen && nvfile.IsLibrary(e.Path))) {
			p.ownImage = true
		}
		if e.Kind == tracer.KindAPI {
			p.api = true
			if e.Func == "cuInit" && e.Ret == 0 {
				f.inits = append(f.inits, i)
			}
		}
	}
	return f
}

// inherited is whether process pid runs a memory image it did not load
// itself: the trace shows it make no successful exec and open no CUDA
// library, so it is a fork of a traced process (or was attached to).
func (f *forkFacts) inherited(pid int) bool { return f.procs[pid] != nil && !f.procs[pid].ownImage }

// initBefore is the last successful cuInit of a process other than pid up
// to pid's first event, or nil.
func (f *forkFacts) initBefore(pid int) *tracer.Event {
	upto := f.procs[pid].first
	for k := sort.SearchInts(f.inits, upto+1) - 1; k >= 0; k-- {
		if e := &f.events[f.inits[k]]; e.PID != pid {
			return e
		}
	}
	return nil
}

// checkForkAfterInit: a process that inherited its image from a traced
// process which had initialised CUDA cannot use CUDA. CUDA's state (its
// driver fds, mappings and threads) does not survive fork: the child's CUDA
// calls return 3 (CUDA_ERROR_NOT_INITIALIZED), and PyTorch refuses in the
// child without calling CUDA ("Cannot re-initialize CUDA in forked
// subprocess") and the child exits non-zero.
func (a *analyzer) checkForkAfterInit() {
	var child, parent *tracer.Event
	inferred := false
	facts := a.forkFacts()
	if len(facts.inits) == 0 {
		return // no process initialised CUDA: nothing was forked after it
	}
	if f := a.cudaFailed(); f != nil && f.Ret == cudaNotInitialized && !f.Unprobed && facts.inherited(f.PID) {
		if p := facts.initBefore(f.PID); p != nil {
			child, parent = f, p
		}
	}
	if child == nil && a.cudaFailed() == nil {
		// No CUDA call failed: a child that inherited a CUDA-initialised
		// image, made no CUDA call and exited non-zero is the PyTorch shape.
		for i := range a.ev {
			x := &a.ev[i]
			if x.Kind != tracer.KindExit || (x.ExitCode == 0 && x.Signal == 0) || facts.procs[x.PID].api || !facts.inherited(x.PID) {
				continue
			}
			if p := facts.initBefore(x.PID); p != nil {
				child, parent, inferred = x, p, true
				break
			}
		}
	}
	if child == nil {
		return
	}
	d := []string{fmt.Sprintf("cuInit returned 0 in %s at +%.3fs.", nvdev.Caller(parent), parent.Time.Seconds())}
	if child.Kind == tracer.KindAPI {
		d = append(d, fmt.Sprintf("Later `%s()` in %s returned %d (%s).", child.Func, nvdev.Caller(child), child.Ret, nvdev.ReturnName(child.Func, child.Ret)))
	} else {
		how := fmt.Sprintf("exited %d", child.ExitCode)
		if child.Signal != 0 {
			how = "was killed by signal " + fmt.Sprint(child.Signal)
		}
		d = append(d, fmt.Sprintf("%s called no CUDA entry point and %s: PyTorch raises \"Cannot re-initialize CUDA in forked subprocess\" in such a child without calling CUDA.", nvdev.Caller(child), how))
	}
	d = append(d, fmt.Sprintf("%s made no exec and did not load libcuda itself, so it runs a copy of its parent's memory: it was forked after CUDA was initialised there. CUDA's state (driver fds, mappings, threads) does not survive fork, so every CUDA call in the child returns 3 (CUDA_ERROR_NOT_INITIALIZED).", nvdev.Caller(child)))
	a.add(Finding{ID: "cuda-fork-after-init", Severity: SeverityError,
		Summary:  fmt.Sprintf("%s was forked from %s after it had initialised CUDA; a forked child cannot use CUDA", nvdev.Caller(child), nvdev.Caller(parent)),
		Detail:   d,
		Fix:      "Start the workers with the spawn or forkserver start method (`multiprocessing.set_start_method(\"spawn\")`, `torch.multiprocessing.set_start_method(\"spawn\")`, or `DataLoader(..., multiprocessing_context=\"spawn\")`), or initialise CUDA only in the children: no CUDA call (torch.cuda.*, .cuda()) in the parent before it forks.",
		Inferred: inferred, Events: []uint64{parent.Seq, child.Seq}}, "")
}
