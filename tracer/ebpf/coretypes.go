package ebpf

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"slices"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
	"golang.org/x/sys/unix"
)

// The uprobe programs (ct_api_*, loaded alone under ptrace) read two or
// three fields of pt_regs through CO-RE, yet relocating them against the
// kernel's BTF parses all of vmlinux (~150k types, 12 ms of CPU here, 20 on
// the H200) beside the target's start. They need no attach target and no
// kfunc, so the kernel types they need, and nothing else, serve as their
// KernelTypes: made from vmlinux once per kernel and cached on disk.
//
// The syscall and lifecycle programs cannot use such a spec: cilium/ebpf
// finds tp_btf attach targets and kfuncs through btf.Cache, which always
// parses all of vmlinux, and their bpf_core_type_id_kernel relocations need
// the kernel's own type IDs, which a reduced spec renumbers.

// coreTypesDir holds the cached specs, one per kernel BTF and BPF object.
var coreTypesDir = "/var/cache/cudatrace/btf"

const coreTypesMagic = "cudatrace core types v1\n"

// reduced is a spec with the kernel types progs' CO-RE relocations name,
// each cut to the members the object's own definition of it (in local, the
// object's BTF: vmlinux_min.h) names, as bpftool gen min_core_btf cuts
// them: task_struct whole drags in thousands of types. It is returned only
// when relocating progs against it gives the very instructions relocating
// against kernel gives; otherwise an error.
func reduced(kernel, local *btf.Spec, progs []*ebpf.ProgramSpec) ([]byte, error) {
	var b btf.Builder
	pr := newPruner(local)
	names := map[string]bool{}
	for _, p := range progs {
		for _, name := range relocatedNames(p.Instructions) {
			if names[name] {
				continue
			}
			names[name] = true
			types, err := kernel.AnyTypesByName(name)
			if errors.Is(err, btf.ErrNotFound) {
				continue // the relocation finds nothing in the reduced spec either
			}
			if err != nil {
				return nil, err
			}
			for _, t := range types {
				if _, err := b.Add(pr.prune(t, pr.byName[name])); err != nil {
					return nil, err
				}
			}
		}
	}
	raw, err := b.Marshal(nil, nil)
	if err != nil {
		return nil, err
	}
	small, err := btf.LoadSpecFromReader(bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	for _, p := range progs {
		if err := sameRelocations(p, kernel, small); err != nil {
			return nil, err
		}
	}
	return raw, nil
}

// pruner cuts kernel types to the members the object's definitions name.
type pruner struct {
	// byName are the object's composite types by essential name, the
	// flavours (pt_regs___x86, ___arm64) merged: a member any of them
	// names is kept.
	byName map[string]btf.Type
	memo   map[btf.Type]btf.Type
}

func newPruner(local *btf.Spec) *pruner {
	p := &pruner{byName: map[string]btf.Type{}, memo: map[btf.Type]btf.Type{}}
	if local == nil {
		return p
	}
	merged := map[string]*btf.Struct{}
	for t, err := range local.All() {
		if err != nil {
			break // what was read serves: a member missed fails the relocation check
		}
		var name string
		var members []btf.Member
		switch c := t.(type) {
		case *btf.Struct:
			name, members = c.Name, c.Members
		case *btf.Union:
			name, members = c.Name, c.Members
		default:
			continue
		}
		name, _, _ = strings.Cut(name, "___")
		if name == "" {
			continue
		}
		m := merged[name]
		if m == nil {
			m = &btf.Struct{Name: name}
			merged[name] = m
			p.byName[name] = m
		}
		m.Members = append(m.Members, members...)
	}
	return p
}

// localMembers are the members of l (after typedefs and qualifiers), by
// name; nil when l is not a struct or union, or unknown.
func localMembers(l btf.Type) map[string]btf.Type {
	var members []btf.Member
	switch c := btf.UnderlyingType(l).(type) {
	case *btf.Struct:
		members = c.Members
	case *btf.Union:
		members = c.Members
	default:
		return nil
	}
	out := map[string]btf.Type{}
	for _, m := range members {
		if m.Name != "" {
			out[m.Name] = m.Type
		}
	}
	return out
}

// prune copies kernel type k with the members of each struct or union
// that l, the object's type in its place, names, recursively; sizes and
// offsets stay the kernel's. A kernel composite whose local counterpart is
// not one (or unknown) is kept whole.
func (p *pruner) prune(k, l btf.Type) btf.Type {
	if c, ok := p.memo[k]; ok {
		return c
	}
	switch kt := k.(type) {
	case *btf.Struct:
		c := &btf.Struct{Name: kt.Name, Size: kt.Size}
		return p.pruneComposite(k, l, c, kt.Members, &c.Members)
	case *btf.Union:
		c := &btf.Union{Name: kt.Name, Size: kt.Size}
		return p.pruneComposite(k, l, c, kt.Members, &c.Members)
	case *btf.Pointer:
		var lt btf.Type
		if lp, ok := btf.UnderlyingType(l).(*btf.Pointer); ok {
			lt = lp.Target
		}
		return &btf.Pointer{Target: p.prune(kt.Target, lt)}
	case *btf.Array:
		var lt btf.Type
		if la, ok := btf.UnderlyingType(l).(*btf.Array); ok {
			lt = la.Type
		}
		return &btf.Array{Index: kt.Index, Type: p.prune(kt.Type, lt), Nelems: kt.Nelems}
	case *btf.Typedef:
		return &btf.Typedef{Name: kt.Name, Type: p.prune(kt.Type, l)}
	case *btf.Const:
		return &btf.Const{Type: p.prune(kt.Type, l)}
	case *btf.Volatile:
		return &btf.Volatile{Type: p.prune(kt.Type, l)}
	}
	return k // ints, enums, floats: leaves
}

// pruneComposite fills c, the copy of composite k, with the members of k
// that l names; k itself when l is no composite.
func (p *pruner) pruneComposite(k, l, c btf.Type, members []btf.Member, out *[]btf.Member) btf.Type {
	lm := localMembers(l)
	if lm == nil {
		return k
	}
	p.memo[k] = c
	*out = p.pruneMembers(members, l, lm)
	return c
}

// pruneMembers keeps the members lm names; an anonymous struct or union
// (CO-RE looks through them for a name) is kept when it holds one.
func (p *pruner) pruneMembers(members []btf.Member, l btf.Type, lm map[string]btf.Type) []btf.Member {
	var out []btf.Member
	for _, m := range members {
		var t btf.Type
		switch lt, ok := lm[m.Name]; {
		case ok:
			t = p.prune(m.Type, lt)
		case m.Name == "":
			if localMembers(m.Type) == nil {
				continue
			}
			t = p.prune(m.Type, l) // the same names, one level down
			if inner := localMembers(t); len(inner) == 0 {
				continue
			}
		default:
			continue
		}
		out = append(out, btf.Member{Name: m.Name, Type: t, Offset: m.Offset, BitfieldSize: m.BitfieldSize})
	}
	return out
}

// relocName is a CO-RE relocation's local type name, as String shows it:
// cilium/ebpf has no accessor. A name missed makes the reduced spec lack
// its type, which the comparison in reduced then refuses.
var relocName = regexp.MustCompile(`^CORERelocation\([a-z_]+, [A-Za-z]+:"([^"]+)"`)

// relocatedNames are the essential names (no ___flavour) of the local
// types insns' CO-RE relocations name.
func relocatedNames(insns asm.Instructions) []string {
	var names []string
	for i := range insns {
		r := btf.CORERelocationMetadata(&insns[i])
		if r == nil {
			continue
		}
		if m := relocName.FindStringSubmatch(r.String()); m != nil {
			name, _, _ := strings.Cut(m[1], "___")
			names = append(names, name)
		}
	}
	return names
}

// sameRelocations: p relocated against a and against b gives the same
// instructions, byte for byte.
func sameRelocations(p *ebpf.ProgramSpec, a, b *btf.Spec) error {
	ia, err := relocated(p, a)
	if err != nil {
		return err
	}
	ib, err := relocated(p, b)
	if err != nil {
		return err
	}
	if !bytes.Equal(ia, ib) {
		return fmt.Errorf("%s: CO-RE relocations against the reduced kernel types differ", p.Name)
	}
	return nil
}

// relocated is p's instructions with its CO-RE relocations applied against
// target, as cilium/ebpf applies them at load (btf.CORERelocate), encoded.
func relocated(p *ebpf.ProgramSpec, target *btf.Spec) ([]byte, error) {
	insns := slices.Clone(p.Instructions)
	var relos []*btf.CORERelocation
	var at []int
	for i := range insns {
		if r := btf.CORERelocationMetadata(&insns[i]); r != nil {
			relos, at = append(relos, r), append(at, i)
		}
	}
	bo := p.ByteOrder
	if bo == nil {
		bo = binary.NativeEndian
	}
	var local btf.Builder
	fixups, err := btf.CORERelocate(relos, []*btf.Spec{target}, bo, local.Add)
	if err != nil {
		return nil, err
	}
	for i, f := range fixups {
		if err := f.Apply(&insns[at[i]]); err != nil {
			return nil, err
		}
	}
	var buf bytes.Buffer
	if err := insns.Marshal(&buf, bo); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// coreTypesKey names the cached spec for this kernel's BTF and this BPF
// object and cilium/ebpf: a checksum of vmlinux's BTF contents (two CRCs of
// the mmapped file, 0.7 ms here; its SHA-256 took 7), its size, the
// object's SHA-256.
func coreTypesKey() (string, error) {
	f, err := os.Open(vmlinuxBTF)
	if err != nil {
		return "", err
	}
	defer func() { _ = f.Close() }() // read-only
	st, err := f.Stat()
	if err != nil {
		return "", err
	}
	raw, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_PRIVATE)
	var c, ieee uint32
	if err == nil {
		c, ieee = crc32.Checksum(raw, crc32.MakeTable(crc32.Castagnoli)), crc32.ChecksumIEEE(raw)
		_ = unix.Munmap(raw) // nothing to do if it fails
	} else {
		b, err := io.ReadAll(f)
		if err != nil {
			return "", err
		}
		c, ieee = crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)), crc32.ChecksumIEEE(b)
	}
	obj := sha256.Sum256(_BpfBytes)
	return fmt.Sprintf("%08x%08x-%d-%x-%s", c, ieee, st.Size(), obj[:12], ciliumVersion()), nil
}

// ciliumVersion: another cilium/ebpf may relocate otherwise.
func ciliumVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, m := range bi.Deps {
			if m.Path == "github.com/cilium/ebpf" {
				return strings.NewReplacer("/", "_", " ", "_").Replace(m.Version)
			}
		}
	}
	return "unknown"
}

func coreTypesPath(key string) string { return filepath.Join(coreTypesDir, key+".btf") }

// errCoreTypesUntrusted: a cache file or directory not written by root
// alone is not read.
var errCoreTypesUntrusted = errors.New("not owned by root, or writable by others")

// trusted: owned by root and writable by no one else.
func trusted(st *unix.Stat_t) bool { return st.Uid == 0 && st.Mode&0o022 == 0 }

// readCoreTypes returns the cached spec for key; any error means none to
// use (missing, stale, corrupt, or not root's alone).
func readCoreTypes(key string) (*btf.Spec, error) {
	var dst unix.Stat_t
	if err := unix.Lstat(coreTypesDir, &dst); err != nil {
		return nil, err
	}
	if dst.Mode&unix.S_IFMT != unix.S_IFDIR || !trusted(&dst) {
		return nil, fmt.Errorf("%s: %w", coreTypesDir, errCoreTypesUntrusted)
	}
	fd, err := unix.Open(coreTypesPath(key), unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), coreTypesPath(key))
	defer func() { _ = f.Close() }() // read-only
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || !trusted(&st) {
		return nil, fmt.Errorf("%s: %w", f.Name(), errCoreTypesUntrusted)
	}
	const limit = 1 << 20 // a few structs: far below
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if len(b) > limit {
		return nil, fmt.Errorf("%s: too large", f.Name())
	}
	return parseCoreTypes(b, key)
}

// The file: magic, key line, SHA-256 of the BTF in hex, newline, the BTF.
func encodeCoreTypes(raw []byte, key string) []byte {
	sum := sha256.Sum256(raw)
	return append([]byte(coreTypesMagic+key+"\n"+hex.EncodeToString(sum[:])+"\n"), raw...)
}

func parseCoreTypes(b []byte, key string) (*btf.Spec, error) {
	rest, ok := bytes.CutPrefix(b, []byte(coreTypesMagic+key+"\n"))
	if !ok {
		return nil, errors.New("cached kernel types: another format or kernel")
	}
	sum, raw, ok := bytes.Cut(rest, []byte("\n"))
	want := sha256.Sum256(raw)
	if !ok || string(sum) != hex.EncodeToString(want[:]) {
		return nil, errors.New("cached kernel types: checksum mismatch")
	}
	return btf.LoadSpecFromReader(bytes.NewReader(raw))
}

// writeCoreTypes caches raw for key, root's alone: a new file renamed
// over the old, in a directory it makes (or finds) root's alone.
func writeCoreTypes(raw []byte, key string) error {
	if os.Geteuid() != 0 {
		return errors.New("not root: a cache could not be trusted")
	}
	if err := os.MkdirAll(coreTypesDir, 0o755); err != nil {
		return err
	}
	var dst unix.Stat_t
	if err := unix.Lstat(coreTypesDir, &dst); err != nil {
		return err
	}
	if dst.Mode&unix.S_IFMT != unix.S_IFDIR || !trusted(&dst) {
		return fmt.Errorf("%s: %w", coreTypesDir, errCoreTypesUntrusted)
	}
	tmp, err := os.CreateTemp(coreTypesDir, ".new-*")
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(tmp.Name()) }() // gone after the rename
	_, werr := tmp.Write(encodeCoreTypes(raw, key))
	if err := errors.Join(werr, tmp.Chmod(0o644), tmp.Close()); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), coreTypesPath(key))
}
