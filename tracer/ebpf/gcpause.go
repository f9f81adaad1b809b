package ebpf

import (
	"runtime/debug"
	"sync"
)

// Start-up allocates in bursts (the kernel's BTF index, the object, the
// programs' copies) that the target waits on; a collection in the middle
// of them stops the loaders. The collector is held off while any load is
// in flight, and the setting is restored when the last one ends: loads
// may overlap (tests, a library user), and GOGC may have been set. The
// heap it lets grow is start-up's own, a few tens of MB at most.
var gcHold struct {
	sync.Mutex
	n     int
	saved int
}

// pauseGC holds the collector off until the returned func is called.
func pauseGC() (resume func()) {
	gcHold.Lock()
	if gcHold.n == 0 {
		gcHold.saved = debug.SetGCPercent(-1)
	}
	gcHold.n++
	gcHold.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			gcHold.Lock()
			defer gcHold.Unlock()
			gcHold.n--
			if gcHold.n == 0 {
				debug.SetGCPercent(gcHold.saved)
			}
		})
	}
}
