package ebpf

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cilium/ebpf/link"

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
			p.probes.preProbe(libs, func() bool { asked++; return tc.wanted })
			p.probes.background.Wait()
			if got := len(p.Libraries()); got != tc.probed {
				t.Errorf("%d libraries probed (%v), want %d", got, p.Libraries(), tc.probed)
			}
			if asked == 0 {
				t.Error("wanted was never asked")
			}
			p.probes.mu.Lock()
			links := len(p.probes.links)
			p.probes.mu.Unlock()
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
		p.probes.preProbe(libs, func() bool { return true })
		p.Close() // waits for the goroutine
		p.probes.mu.Lock()
		defer p.probes.mu.Unlock()
		if len(p.probes.links) != 0 {
			t.Errorf("%d links left after close", len(p.probes.links))
		}
		for _, l := range libs {
			if l.File.Fd() != ^uintptr(0) {
				t.Errorf("%s left open after close", l.Path)
			}
		}
	})
}

// The offsets the probes are attached at, read from .dynsym alone, are the
// ones cilium/ebpf resolves the same names to from all the symbols.
func TestExportedFuncOffsets(t *testing.T) {
	dir := fakelib.Build(t)
	path := filepath.Join(dir, "libcuda.so.1")
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }() // read-only
	got, err := exportedFuncs(f)
	if err != nil {
		t.Fatal(err)
	}
	ex, err := link.OpenExecutable(path)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, fn := range apiFuncs {
		off, ok := got[fn.name]
		if !ok {
			continue
		}
		n++
		sym, err := ex.Symbol(off)
		if err != nil || sym.Symbol != fn.name || sym.Offset != 0 {
			t.Errorf("%s at offset %#x: cilium/ebpf says %+v (%v)", fn.name, off, sym, err)
		}
	}
	if n == 0 || got["cuInit"] == 0 {
		t.Fatalf("no entry point found in %s: %v", path, got)
	}
}

// A library file the target made may be anything: a truncated or garbage
// ELF is an error, never a panic or a huge allocation.
func TestExportedFuncsHostileFile(t *testing.T) {
	dir := fakelib.Build(t)
	good, err := os.ReadFile(filepath.Join(dir, "libcuda.so.1"))
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{
		"empty":     nil,
		"truncated": good[:len(good)/3],
		"header":    good[:64],
		"garbage":   append(append([]byte{}, good[:16]...), make([]byte, 4096)...),
	} {
		path := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := exportedFuncs(f); err == nil && len(got) > 0 {
			t.Errorf("%s: found %v in a broken file", name, got)
		}
		_ = f.Close() // read-only
	}
}

// A launched target's libcuda, on cudatrace's LD_LIBRARY_PATH as the
// loader would find it, has cuInit's return recorded whether the target
// opens it at once (held by the kernel until it is probed: the background
// probing waits preProbeAfter), at once under another name (held by its
// inode), or after the background probing put the probes on.
func TestLaunchedTargetLibraryProbed(t *testing.T) {
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
