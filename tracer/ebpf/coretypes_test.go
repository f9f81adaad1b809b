package ebpf

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"golang.org/x/sys/unix"

	"github.com/cudatrace/cudatrace/internal/privtest"
)

var apiProgs = []string{bpfProgCtApiEnter, bpfProgCtApiRet, bpfProgCtApiEnterMulti, bpfProgCtApiRetMulti}

// Every program relocated against the reduced kernel types gives the
// instructions the whole vmlinux gives, byte for byte, or the reduced spec
// is refused: the uprobe programs get one, and the syscall programs, whose
// bpf_core_type_id_kernel needs the kernel's own type IDs, must not.
func TestReducedCoreTypesRelocateAlike(t *testing.T) {
	kernel, spec := kernelAndObject(t)
	for name, p := range spec.Programs {
		t.Run(name, func(t *testing.T) {
			raw, err := reduced(kernel, spec.Types, []*ebpf.ProgramSpec{p})
			if slices.Contains(apiProgs, name) {
				if err != nil {
					t.Fatalf("a uprobe program's kernel types were refused: %v", err)
				}
				small, err := btf.LoadSpecFromReader(bytes.NewReader(raw))
				if err != nil {
					t.Fatal(err)
				}
				want, err := relocated(p, kernel)
				if err != nil {
					t.Fatal(err)
				}
				got, err := relocated(p, small)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, want) {
					t.Fatal("instructions differ")
				}
				t.Logf("reduced spec: %d bytes", len(raw))
				if n := len(raw); n > 4096 {
					t.Errorf("reduced spec %d bytes: more than the few types it needs", n)
				}
				return
			}
			if name == bpfProgCtSysExit || name == bpfProgCtSysEnter {
				if err == nil {
					t.Fatal("a reduced spec was made for a program that needs the kernel's type IDs")
				}
			}
		})
	}
}

// A cache file is read only when it is root's alone, a regular file
// reached without a symlink, in a directory root's alone, for this very
// key, whole; each other case is refused (and rebuilt by the load).
func TestCoreTypesCacheRejected(t *testing.T) {
	privtest.RequireRoot(t)
	kernel, spec := kernelAndObject(t)
	raw, err := reduced(kernel, spec.Types, []*ebpf.ProgramSpec{spec.Programs[bpfProgCtApiRet]})
	if err != nil {
		t.Fatal(err)
	}
	key, err := coreTypesKey()
	if err != nil {
		t.Fatal(err)
	}
	good := encodeCoreTypes(raw, key)
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, dir, file string)
		ok    bool
	}{
		{"valid", func(t *testing.T, dir, file string) { write(t, file, good, 0o644) }, true},
		{"missing", func(t *testing.T, dir, file string) {}, false},
		{"stale: another kernel's key", func(t *testing.T, dir, file string) {
			write(t, file, encodeCoreTypes(raw, "0000000000000000-1-00-v0"), 0o644)
		}, false},
		{"corrupt", func(t *testing.T, dir, file string) {
			b := slices.Clone(good)
			b[len(b)-3] ^= 0xff
			write(t, file, b, 0o644)
		}, false},
		{"truncated", func(t *testing.T, dir, file string) { write(t, file, good[:len(good)-10], 0o644) }, false},
		{"world-writable", func(t *testing.T, dir, file string) { write(t, file, good, 0o666) }, false},
		{"group-writable", func(t *testing.T, dir, file string) { write(t, file, good, 0o664) }, false},
		{"owned by someone else", func(t *testing.T, dir, file string) {
			write(t, file, good, 0o644)
			if err := os.Chown(file, 65534, 65534); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"symlink", func(t *testing.T, dir, file string) {
			other := filepath.Join(t.TempDir(), "elsewhere")
			write(t, other, good, 0o644)
			if err := os.Symlink(other, file); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"fifo", func(t *testing.T, dir, file string) {
			if err := unix.Mkfifo(file, 0o644); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"directory writable by others", func(t *testing.T, dir, file string) {
			write(t, file, good, 0o644)
			if err := os.Chmod(dir, 0o777); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"directory a symlink", func(t *testing.T, dir, file string) {
			real := t.TempDir()
			write(t, filepath.Join(real, filepath.Base(file)), good, 0o644)
			if err := os.Remove(dir); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(real, dir); err != nil {
				t.Fatal(err)
			}
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "btf")
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			defer func(d string) { coreTypesDir = d }(coreTypesDir)
			coreTypesDir = dir
			tc.setup(t, dir, coreTypesPath(key))
			s, err := readCoreTypes(key)
			if tc.ok != (err == nil) {
				t.Fatalf("read: %v, want ok %v", err, tc.ok)
			}
			if tc.ok {
				if _, err := s.AnyTypeByName("pt_regs"); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// kernelAndObject are vmlinux's BTF, parsed, and the BPF object's spec.
func kernelAndObject(t *testing.T) (*btf.Spec, *ebpf.CollectionSpec) {
	t.Helper()
	kernel, err := btf.LoadKernelSpec()
	if err != nil {
		t.Skipf("no kernel BTF: %v", err)
	}
	spec, err := loadBpf()
	if err != nil {
		t.Fatal(err)
	}
	return kernel, spec
}

func write(t *testing.T, name string, b []byte, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(name, b, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(name, mode); err != nil { // past the umask
		t.Fatal(err)
	}
}

// The first load parses vmlinux and caches the uprobe programs' types; the
// next takes them from the cache; a hostile file in its place is replaced.
func TestAPIProbesCacheKernelTypes(t *testing.T) {
	privtest.RequireRoot(t)
	dir := filepath.Join(t.TempDir(), "btf")
	defer func(d string) { coreTypesDir = d }(coreTypesDir)
	coreTypesDir = dir
	key, err := coreTypesKey()
	if err != nil {
		t.Fatal(err)
	}
	load := func() {
		t.Helper()
		p, err := StartAPIProbes(time.Now())
		if err != nil {
			t.Fatal(err)
		}
		p.Close()
	}
	load()
	opts, missKey, err := apiLoadOptions()
	if err != nil || missKey != "" {
		t.Fatalf("after a load: key %q, err %v: the types were not cached", missKey, err)
	}
	if n := countTypes(t, opts.Programs.KernelTypes); n > 64 {
		t.Errorf("cached spec has %d types", n)
	}
	// Another user's file in its place: not read, and replaced by the load.
	if err := os.Chown(coreTypesPath(key), 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if _, missKey, _ := apiLoadOptions(); missKey == "" {
		t.Fatal("a file owned by another user was read")
	}
	load()
	if _, err := readCoreTypes(key); err != nil {
		t.Fatalf("not rebuilt: %v", err)
	}
}

func countTypes(t *testing.T, s *btf.Spec) int {
	t.Helper()
	n := 0
	for _, err := range s.All() {
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	return n
}
