package ebpf

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cudatrace/cudatrace/internal/fakelib"
	"github.com/cudatrace/cudatrace/internal/privtest"
	"github.com/cudatrace/cudatrace/snapshot"
	"github.com/cudatrace/cudatrace/tracer"
)

// The background probing of a launched target's libraries makes no link
// once nobody is left to probe for (a target that exits at once pays no
// uprobe detach), probes them all otherwise, and close waits for it: no
// link is made after close, and the library files are closed.
func TestPreProbe(t *testing.T) {
	privtest.RequireRoot(t)
	dir := fakelib.Build(t)
	for _, tc := range []struct {
		name   string
		wanted bool
		probed int
	}{{"target gone", false, 0}, {"target running", true, 2}} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := StartAPIProbes(time.Now())
			if err != nil {
				t.Fatal(err)
			}
			libs := snapshot.OpenCUDALibraries("/", dir)
			if len(libs) != 2 {
				t.Fatalf("found %d libraries in %s, want the fake libcuda and libnvidia-ml", len(libs), dir)
			}
			asked := 0
			p.probes.PreProbe(libs, func() bool { asked++; return tc.wanted })
			p.probes.Wait()
			if got := len(p.Libraries()); got != tc.probed {
				t.Errorf("%d libraries probed (%v), want %d", got, p.Libraries(), tc.probed)
			}
			if asked == 0 {
				t.Error("wanted was never asked")
			}
			links := p.probes.Links()
			if tc.probed == 0 && links != 0 {
				t.Errorf("%d links made for nobody", links)
			}
			for _, l := range libs {
				if l.File.Fd() != ^uintptr(0) {
					t.Errorf("%s left open", l.Path)
				}
			}
			p.Close()
		})
	}
	t.Run("close during probing", func(t *testing.T) {
		p, err := StartAPIProbes(time.Now())
		if err != nil {
			t.Fatal(err)
		}
		libs := snapshot.OpenCUDALibraries("/", dir)
		p.probes.PreProbe(libs, func() bool { return true })
		p.Close() // waits for the goroutine
		if n := p.probes.Links(); n != 0 {
			t.Errorf("%d links left after close", n)
		}
		for _, l := range libs {
			if l.File.Fd() != ^uintptr(0) {
				t.Errorf("%s left open after close", l.Path)
			}
		}
	})
}

// A launched target's libcuda, on cudatrace's LD_LIBRARY_PATH as the
// loader would find it, has cuInit's return recorded whether the target
// opens it at once (held by the kernel until it is probed: the background
// probing waits uprobe's preProbeAfter), at once under another name (held by its
// inode), or after the background probing put the probes on.
func TestLaunchedTargetLibraryProbed(t *testing.T) {
	privtest.RequireRoot(t) // before building the library: as an ordinary user, or under -short, it skips at once
	dir := fakelib.Build(t)
	t.Setenv("LD_LIBRARY_PATH", dir) // cudatrace's, where it looks for the loader's choice
	app := "LD_LIBRARY_PATH=" + dir + " exec " + filepath.Join(dir, "app")
	lib := filepath.Join(dir, "libcuda.so.1")
	// The same file under a name that is not libcuda's: held by its inode
	// while the background probing is pending.
	alias := filepath.Join(t.TempDir(), "libgpu-runtime.so")
	if err := os.Symlink(lib, alias); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, script string }{
		{"opened at once", app},
		{"opened after the probing", "sleep 0.2; " + app},
		{"opened at once under another name", app + " " + alias},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, rec := traceCmd(t, tracer.Spec{}, tc.script)
			inits := rec.find(func(e *tracer.Event) bool { return e.Kind == tracer.KindAPI && e.Func == "cuInit" })
			if len(inits) != 1 || inits[0].Comm != "app" {
				t.Fatalf("cuInit returns %+v; events:\n%s", inits, rec.dump())
			}
			if len(res.APILibraries) == 0 || res.Exit == nil || res.Exit.Code != 0 {
				t.Errorf("result %+v", res)
			}
		})
	}
}
