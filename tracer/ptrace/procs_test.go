package ptrace

import (
	"runtime"
	"testing"

	"github.com/cudatrace/cudatrace/internal/privtest"
	"github.com/cudatrace/cudatrace/tracer"
)

// A Run raises GOMAXPROCS to 2 while it traces and puts it back after.
func TestRunSparesAP(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	var during int
	b := New().(*Backend)
	_, err := b.Run(privtest.Deadline(t), tracer.Spec{Argv: []string{"/bin/true"}}, tracer.SinkFunc(func(*tracer.Event) {
		during = runtime.GOMAXPROCS(0)
	}))
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if during != minProcs {
		t.Errorf("GOMAXPROCS during the Run: %d, want %d", during, minProcs)
	}
	if n := runtime.GOMAXPROCS(0); n != 1 {
		t.Errorf("GOMAXPROCS after the Run: %d, want 1", n)
	}
}

// Overlapping users: the first to raise restores, once the last is done;
// a value already high enough is left alone.
func TestSparePNesting(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	r1 := spareP()
	r2 := spareP()
	r1()
	r1() // a second call is a no-op
	if n := runtime.GOMAXPROCS(0); n != minProcs {
		t.Fatalf("after the first of two restores: %d, want %d", n, minProcs)
	}
	r2()
	if n := runtime.GOMAXPROCS(0); n != 1 {
		t.Fatalf("after the last restore: %d, want 1", n)
	}
	runtime.GOMAXPROCS(3)
	spareP()()
	if n := runtime.GOMAXPROCS(0); n != 3 {
		t.Fatalf("GOMAXPROCS 3 became %d", n)
	}
}
