package snapshot

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"path"
	"regexp"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"
)

// rootFS reads files inside a root directory the way a process whose root
// it is would, without letting the tree escape it: every open resolves
// with RESOLVE_IN_ROOT, so a symlink to /etc/shadow in a container's tree
// leads to the container's /etc/shadow, not the host's.
type rootFS struct {
	fd int // O_PATH directory fd of the root
}

func openRootFS(root string) (*rootFS, error) {
	fd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return &rootFS{fd: fd}, nil
}

func (r *rootFS) close() { _ = unix.Close(r.fd) } // read-only: a failed close loses nothing

// open looks p up inside the root, O_PATH: nothing is opened. What is
// read is then opened through openHandle (readFile, openFile, readDir),
// never by path.
func (r *rootFS) open(p string, flags int) (int, error) {
	how := unix.OpenHow{Flags: uint64(flags | unix.O_PATH | unix.O_CLOEXEC), Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS}
	for {
		fd, err := unix.Openat2(r.fd, strings.TrimPrefix(p, "/"), &how)
		if !errors.Is(err, unix.EINTR) && !errors.Is(err, unix.EAGAIN) {
			return fd, err
		}
	}
}

// handle is open as an *os.File.
func (r *rootFS) handle(p string) (*os.File, error) {
	fd, err := r.open(p, 0)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), p), nil
}

// openFile opens the regular file p for reading (see openHandle).
func (r *rootFS) openFile(p string) (*os.File, error) {
	h, err := r.handle(p)
	if err != nil {
		return nil, err
	}
	defer func() { _ = h.Close() }() // O_PATH: nothing to lose
	return openHandle(h)
}

// readFile reads at most limit bytes of p; truncated says there was more.
// Only regular files are read (openHandle), so a FIFO or device planted in
// the tree is never opened.
func (r *rootFS) readFile(p string, limit int64) (data []byte, truncated bool, err error) {
	h, err := r.handle(p)
	if err != nil {
		return nil, false, err
	}
	defer func() { _ = h.Close() }() // O_PATH: nothing to lose
	data, err = readHandle(h, limit)
	if errors.Is(err, errTooLarge) {
		return data, true, nil
	}
	return data, false, err
}

// isFile reports whether p is a regular file (after symlinks, in the root).
func (r *rootFS) isFile(p string) bool {
	fd, err := r.open(p, 0)
	if err != nil {
		return false
	}
	defer func() { _ = unix.Close(fd) }() // read-only: a failed close loses nothing
	var st unix.Stat_t
	return unix.Fstat(fd, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG
}

// readDir lists a directory's entry names (at most limit).
func (r *rootFS) readDir(p string, limit int) ([]string, error) {
	h, err := r.handle(p)
	if err != nil {
		return nil, err
	}
	defer func() { _ = h.Close() }() // O_PATH: nothing to lose
	d, err := reopen(h, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NONBLOCK)
	if err != nil {
		return nil, err
	}
	defer func() { _ = d.Close() }() // read-only: a failed close loses nothing
	fd := int(d.Fd())
	var names []string
	buf := make([]byte, 16384)
	for len(names) < limit {
		n, err := unix.ReadDirent(fd, buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return names, err
		}
		if n <= 0 {
			break
		}
		_, _, names = unix.ParseDirent(buf[:n], limit-len(names), names)
	}
	return names, nil
}

// resolve follows p's symlinks inside the root (at most 16) and returns
// the path it ends at, lexically.
func (r *rootFS) resolve(p string) string {
	for range 16 {
		dir, base := path.Split(p)
		dfd, err := r.open(dir, unix.O_DIRECTORY)
		if err != nil {
			return p
		}
		buf := make([]byte, 4096)
		n, err := unix.Readlinkat(dfd, base, buf)
		_ = unix.Close(dfd) // read-only: a failed close loses nothing
		if err != nil || n <= 0 {
			return p
		}
		dest := string(buf[:n])
		if !path.IsAbs(dest) {
			dest = path.Join(dir, dest)
		}
		p = path.Clean(dest)
	}
	return p
}

// elfMatches reports whether p is an ELF shared object this machine's
// loader would load (same class and machine); ld.so skips others in a
// search directory and goes on.
func (r *rootFS) elfMatches(p string) bool {
	data, _, err := r.readFile(p, 64)
	if err != nil || len(data) < 20 || !bytes.HasPrefix(data, []byte(elf.ELFMAG)) {
		return false
	}
	var class elf.Class = elf.ELFCLASS64
	if strings.HasSuffix(runtime.GOARCH, "386") || runtime.GOARCH == "arm" {
		class = elf.ELFCLASS32
	}
	if elf.Class(data[elf.EI_CLASS]) != class {
		return false
	}
	want, ok := elfMachine[runtime.GOARCH]
	return !ok || elf.Machine(binary.LittleEndian.Uint16(data[18:20])) == want
}

var elfMachine = map[string]elf.Machine{
	"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64, "ppc64le": elf.EM_PPC64, "riscv64": elf.EM_RISCV, "s390x": elf.EM_S390,
}

// ldCacheFlags are the ld.so.cache entry flags (libc6 plus the ABI) of
// libraries this machine's loader takes; other architectures accept any
// libc6 entry.
var ldCacheFlags = map[string]int32{"amd64": 0x0303, "arm64": 0x0a03}

const maxLdCache = 16 << 20

// parseLdCache returns the paths ld.so.cache maps soname to, in the
// cache's order (the loader takes the first). Only the format glibc has
// written since 2.32 ("glibc-ld.so.cache1.1") is read.
func parseLdCache(data []byte, soname string) ([]string, error) {
	const magic = "glibc-ld.so.cache1.1"
	if !bytes.HasPrefix(data, []byte(magic)) {
		if bytes.HasPrefix(data, []byte("ld.so-1.7.0")) {
			return nil, errors.New("ld.so.cache is in the pre-2.32 format, not read")
		}
		return nil, errors.New("ld.so.cache: unknown format")
	}
	const header, entry = 48, 24
	if len(data) < header {
		return nil, io.ErrUnexpectedEOF
	}
	nlibs := int(binary.LittleEndian.Uint32(data[20:24]))
	if nlibs < 0 || nlibs > (len(data)-header)/entry {
		return nil, errors.New("ld.so.cache: entry count exceeds file")
	}
	want, checkFlags := ldCacheFlags[runtime.GOARCH]
	str := func(off uint32) (string, bool) {
		if int(off) >= len(data) {
			return "", false
		}
		end := bytes.IndexByte(data[off:], 0)
		if end < 0 {
			return "", false
		}
		return string(data[off : int(off)+end]), true
	}
	var out []string
	for i := range nlibs {
		e := data[header+i*entry:]
		flags := int32(binary.LittleEndian.Uint32(e[0:4]))
		if checkFlags && flags != want || !checkFlags && flags&0xff != 3 {
			continue
		}
		key, ok1 := str(binary.LittleEndian.Uint32(e[4:8]))
		val, ok2 := str(binary.LittleEndian.Uint32(e[8:12]))
		if ok1 && ok2 && key == soname {
			out = append(out, val)
		}
	}
	return out, nil
}

// defaultLibDirs are the loader's built-in directories, searched last.
var defaultLibDirs = []string{"/lib64", "/usr/lib64", "/lib", "/usr/lib"}

var libVersionRE = regexp.MustCompile(`\.so\.(\d+\.\d+(?:\.\d+)?)$`)

// findLibrary resolves soname as ld.so would for a program without rpath:
// LD_LIBRARY_PATH, then ld.so.cache, then the default directories.
func findLibrary(r *rootFS, soname, ldLibraryPath string, cache []string) Library {
	lib := Library{Name: soname}
	type hit struct{ path, via string }
	var hits []hit
	seen := map[string]bool{}
	try := func(p, via string) {
		p = path.Clean(p)
		if seen[p] || !r.elfMatches(p) {
			return
		}
		seen[p] = true
		hits = append(hits, hit{p, via})
	}
	for _, d := range strings.FieldsFunc(ldLibraryPath, func(c rune) bool { return c == ':' || c == ';' }) {
		if path.IsAbs(d) { // relative entries depend on the program's cwd
			try(path.Join(d, soname), "LD_LIBRARY_PATH")
		}
	}
	for _, p := range cache {
		try(p, "ld.so.cache")
	}
	for _, d := range defaultLibDirs {
		try(path.Join(d, soname), "default path")
	}
	if len(hits) == 0 {
		return lib
	}
	lib.Path, lib.Via = hits[0].path, hits[0].via
	lf := LibraryFile{Path: lib.Path}
	if err := readLibraryFile(r, &lf); err == nil {
		lib.Resolved, lib.Version, lib.VersionFrom, lib.Stub = lf.Resolved, lf.Version, lf.VersionFrom, lf.Stub
	} else {
		lib.Resolved = r.resolve(lib.Path)
		if m := libVersionRE.FindStringSubmatch(lib.Resolved); m != nil {
			lib.Version, lib.VersionFrom = m[1], "name"
		}
	}
	for _, h := range hits[1:] {
		lib.Shadowed = append(lib.Shadowed, h.path)
	}
	return lib
}
