package ebpf

import (
	"runtime/debug"
	"testing"
)

// Overlapping holds restore the collector's setting only when the last one
// ends, whatever the order, and a resume called twice counts once.
func TestPauseGCNests(t *testing.T) {
	orig := debug.SetGCPercent(150)
	defer debug.SetGCPercent(orig)
	a := pauseGC()
	b := pauseGC()
	a()
	a()
	if got := debug.SetGCPercent(-1); got != -1 {
		t.Fatalf("GC percent %d after one of two holds ended, want -1 (off)", got)
	}
	b()
	if got := debug.SetGCPercent(150); got != 150 {
		t.Fatalf("GC percent %d after both holds ended, want the saved 150", got)
	}
}
