package ptrace

import (
	"runtime"
	"sync"
)

// runSetting is a process-wide setting changed while any Run is in
// progress: the first Run to start applies it, the last to end undoes it.
type runSetting struct {
	mu    sync.Mutex
	users int
	undo  func() // what apply returned; nil when it changed nothing
}

// hold applies the setting if no Run holds it yet; release (idempotent)
// undoes it once every holder has released.
func (r *runSetting) hold(apply func() (undo func())) (release func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.users == 0 {
		r.undo = apply()
	}
	r.users++
	var once sync.Once
	return func() {
		once.Do(func() {
			r.mu.Lock()
			defer r.mu.Unlock()
			if r.users--; r.users == 0 && r.undo != nil {
				r.undo()
				r.undo = nil
			}
		})
	}
}

// The tracer thread blocks in wait4 between stops. With GOMAXPROCS=1 (a
// tracer pinned to one CPU, as benchmarks do) no P is idle meanwhile, so
// the runtime's sysmon takes the P back from every wait4 that lasts over
// ~20 µs and wakes a spinning M to look for work, which finds none: futex
// wake-ups and a P handoff per stop, on the tracer's own CPU. Measured on
// a 2-vCPU VM, one thread doing openat+ioctl on a traced device: 64 µs per
// traced call with one P, 56 µs with two (strace --seccomp-bpf: 57). With
// a P to spare, sysmon leaves a P in a syscall alone; an idle P costs
// nothing.
var spare runSetting

// minProcs is what spareP raises GOMAXPROCS to: the tracer's P and an idle one.
const minProcs = 2

// spareP makes GOMAXPROCS at least minProcs until restore is called (by
// every caller). The value before is put back, explicitly set.
func spareP() (restore func()) {
	return spare.hold(func() (undo func()) {
		n := runtime.GOMAXPROCS(0)
		if n >= minProcs {
			return nil
		}
		runtime.GOMAXPROCS(minProcs)
		return func() { runtime.GOMAXPROCS(n) }
	})
}
