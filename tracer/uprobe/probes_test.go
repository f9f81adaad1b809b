package uprobe

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/cilium/ebpf/link"

	"github.com/cudatrace/cudatrace/internal/fakelib"
)

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
