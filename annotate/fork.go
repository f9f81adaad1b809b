package annotate

import (
	"fmt"

	"github.com/cudatrace/cudatrace/nvdev"
	"github.com/cudatrace/cudatrace/tracer"
)

// inheritedImage is whether process pid runs a memory image it did not
// load itself: the trace shows it make no successful exec and open no
// CUDA library, so it is a fork of a traced process (or was attached to).
func (a *analyzer) inheritedImage(pid int) bool {
	for i := range a.ev {
		e := &a.ev[i]
		if e.PID != pid || e.Failed() {
			continue
		}
		if e.Kind == tracer.KindExec || (e.Kind == tracer.KindOpen && nvdev.IsLibrary(e.Path)) {
			return false
		}
	}
	return true
}

// cudaInitBefore is the last successful cuInit of a process other than pid
// before index upto, or nil.
func (a *analyzer) cudaInitBefore(pid, upto int) *tracer.Event {
	var ok *tracer.Event
	for i := 0; i < upto && i < len(a.ev); i++ {
		if e := &a.ev[i]; e.Kind == tracer.KindAPI && e.Func == "cuInit" && e.Ret == 0 && e.PID != pid {
			ok = e
		}
	}
	return ok
}

func (a *analyzer) firstEventOf(pid int) int {
	for i := range a.ev {
		if a.ev[i].PID == pid {
			return i
		}
	}
	return -1
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
	if f := a.cudaFailed(); f != nil && f.Ret == cudaNotInitialized && !f.Unprobed && a.inheritedImage(f.PID) {
		if p := a.cudaInitBefore(f.PID, a.firstEventOf(f.PID)+1); p != nil {
			child, parent = f, p
		}
	}
	if child == nil && a.cudaFailed() == nil {
		// No CUDA call failed: a child that inherited a CUDA-initialised
		// image, made no CUDA call and exited non-zero is the PyTorch shape.
		for i := range a.ev {
			x := &a.ev[i]
			if x.Kind != tracer.KindExit || (x.ExitCode == 0 && x.Signal == 0) || a.madeAPICall(x.PID) || !a.inheritedImage(x.PID) {
				continue
			}
			if p := a.cudaInitBefore(x.PID, a.firstEventOf(x.PID)+1); p != nil {
				child, parent, inferred = x, p, true
				break
			}
		}
	}
	if child == nil {
		return
	}
	d := []string{fmt.Sprintf("cuInit returned 0 in %s at +%.3fs.", who(parent), parent.Time.Seconds())}
	if child.Kind == tracer.KindAPI {
		d = append(d, fmt.Sprintf("Later `%s()` in %s returned %d (%s).", child.Func, who(child), child.Ret, apiCodeName(child.Func, child.Ret)))
	} else {
		how := fmt.Sprintf("exited %d", child.ExitCode)
		if child.Signal != 0 {
			how = "was killed by signal " + fmt.Sprint(child.Signal)
		}
		d = append(d, fmt.Sprintf("%s called no CUDA entry point and %s: PyTorch raises \"Cannot re-initialize CUDA in forked subprocess\" in such a child without calling CUDA.", who(child), how))
	}
	d = append(d, fmt.Sprintf("%s made no exec and did not load libcuda itself, so it runs a copy of its parent's memory: it was forked after CUDA was initialised there. CUDA's state (driver fds, mappings, threads) does not survive fork, so every CUDA call in the child returns 3 (CUDA_ERROR_NOT_INITIALIZED).", who(child)))
	a.add(Finding{ID: "cuda-fork-after-init", Severity: SeverityError,
		Summary:  fmt.Sprintf("%s was forked from %s after it had initialised CUDA; a forked child cannot use CUDA", who(child), who(parent)),
		Detail:   d,
		Fix:      "Start the workers with the spawn or forkserver start method (`multiprocessing.set_start_method(\"spawn\")`, `torch.multiprocessing.set_start_method(\"spawn\")`, or `DataLoader(..., multiprocessing_context=\"spawn\")`), or initialise CUDA only in the children: no CUDA call (torch.cuda.*, .cuda()) in the parent before it forks.",
		Inferred: inferred, Events: []uint64{parent.Seq, child.Seq}}, "")
}

func (a *analyzer) madeAPICall(pid int) bool {
	for i := range a.ev {
		if a.ev[i].Kind == tracer.KindAPI && a.ev[i].PID == pid {
			return true
		}
	}
	return false
}
