package snapshot

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"runtime"
	"strings"

	securejoin "github.com/cyphar/filepath-securejoin"
	"golang.org/x/sys/unix"
)

// LibFile is a CUDA or NVML library a process loads or would load, opened
// so that its probes attach to exactly the file that was checked: attach
// through /proc/self/fd/N while File is open.
type LibFile struct {
	File *os.File
	Path string // as the process names it
}

// Close closes the file.
func (l *LibFile) Close() error { return l.File.Close() }

// cudaLibNames are the names libcuda and NVML are loaded by: dlopen
// ("libcuda.so.1") by the CUDA runtime and PyTorch, -lcuda links against
// libcuda.so.1 too; a few tools dlopen the unversioned name.
var cudaLibNames = []string{"libcuda.so.1", "libcuda.so", "libnvidia-ml.so.1", "libnvidia-ml.so"}

// libDirs are where the dynamic loader and NVIDIA's packaging put them:
// the loader's defaults, then the NVIDIA container toolkit's and CUDA's
// directories (compat and stub copies are among them, on purpose: which
// one was loaded is part of the diagnosis).
func libDirs() []string {
	arch := map[string]string{"amd64": "x86_64", "arm64": "aarch64"}[runtime.GOARCH]
	dirs := []string{}
	if arch != "" {
		dirs = append(dirs, "/lib/"+arch+"-linux-gnu", "/usr/lib/"+arch+"-linux-gnu")
	}
	dirs = append(dirs, "/lib64", "/usr/lib64", "/lib", "/usr/lib",
		"/usr/local/nvidia/lib64", "/usr/local/nvidia/lib", "/usr/lib/nvidia", "/usr/lib64/nvidia",
		"/usr/local/cuda/compat", "/usr/local/cuda/lib64", "/usr/local/cuda/lib64/stubs",
		"/usr/lib/wsl/lib")
	if arch != "" {
		dirs = append(dirs, "/usr/local/cuda/targets/"+arch+"-linux/lib/stubs")
	}
	return dirs
}

// Bounds on what the target controls: its ld.so.cache, its environment.
const (
	maxLdCache     = 16 << 20
	maxLibDirs     = 64
	maxLibFiles    = 32
	maxEnvironSize = 1 << 20
)

// OpenCUDALibraries opens every libcuda and libnvidia-ml a process with
// this root directory (e.g. /proc/PID/root) and environment would find, as
// its dynamic loader searches: LD_LIBRARY_PATH, /etc/ld.so.cache, the
// default and NVIDIA directories. Paths are resolved inside root, so a
// symlink cannot lead outside it; only regular files are opened, without
// blocking. Files the same inode as an earlier one are skipped.
func OpenCUDALibraries(root string, env []string) []*LibFile {
	var dirs []string
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "LD_LIBRARY_PATH="); ok {
			for _, d := range strings.Split(v, ":") {
				if d != "" && path.IsAbs(d) {
					dirs = append(dirs, path.Clean(d))
				}
			}
		}
	}
	if len(dirs) > maxLibDirs {
		dirs = dirs[:maxLibDirs]
	}
	var candidates []string
	for _, d := range dirs {
		for _, n := range cudaLibNames {
			candidates = append(candidates, path.Join(d, n))
		}
	}
	if cache, err := readLimited(root, "/etc/ld.so.cache", maxLdCache); err == nil {
		candidates = append(candidates, ParseLdCache(cache, cudaLibNames)...)
	}
	for _, d := range libDirs() {
		for _, n := range cudaLibNames {
			candidates = append(candidates, path.Join(d, n))
		}
	}
	return openUnique(root, candidates)
}

// OpenMappedLibraries opens the libcuda and libnvidia-ml files mapped into
// a running process, through /proc/PID/map_files, so a library replaced on
// disk since is still the one probed.
func OpenMappedLibraries(pid int) []*LibFile {
	f, err := os.Open(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return nil
	}
	defer f.Close()
	seen := map[[2]uint64]bool{}
	var out []*LibFile
	sc := bufio.NewScanner(io.LimitReader(f, 64<<20))
	sc.Buffer(make([]byte, 0, 64<<10), 64<<10)
	for sc.Scan() && len(out) < maxLibFiles {
		// start-end perms offset dev inode path
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || !namesCUDALib(fields[5]) {
			continue
		}
		lf, err := openRegular(fmt.Sprintf("/proc/%d/map_files/%s", pid, fields[0]))
		if err != nil {
			continue
		}
		id, ok := fileID(lf)
		if !ok || seen[id] {
			lf.Close()
			continue
		}
		seen[id] = true
		out = append(out, &LibFile{File: lf, Path: strings.Join(fields[5:], " ")})
	}
	return out
}

// namesCUDALib: a path with a libcuda.so or libnvidia-ml.so component, the
// rule the tracers apply to opens.
func namesCUDALib(p string) bool {
	return strings.Contains(p, "/libcuda.so") || strings.Contains(p, "/libnvidia-ml.so")
}

func openUnique(root string, candidates []string) []*LibFile {
	seenPath := map[string]bool{}
	seenFile := map[[2]uint64]bool{}
	var out []*LibFile
	for _, c := range candidates {
		if seenPath[c] || len(out) >= maxLibFiles {
			continue
		}
		seenPath[c] = true
		full, err := securejoin.SecureJoin(root, c)
		if err != nil {
			continue
		}
		f, err := openRegular(full)
		if err != nil {
			continue
		}
		id, ok := fileID(f)
		if !ok || seenFile[id] {
			f.Close()
			continue
		}
		seenFile[id] = true
		out = append(out, &LibFile{File: f, Path: c})
	}
	return out
}

// openRegular opens p for reading without blocking (a FIFO put in a
// library's place cannot hang us) and keeps it only if it is a regular file.
func openRegular(p string) (*os.File, error) {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, errors.New("not a regular file")
	}
	return os.NewFile(uintptr(fd), p), nil
}

func fileID(f *os.File) ([2]uint64, bool) {
	var st unix.Stat_t
	if unix.Fstat(int(f.Fd()), &st) != nil {
		return [2]uint64{}, false
	}
	return [2]uint64{st.Dev, st.Ino}, true
}

// readLimited reads name inside root: a regular file, at most max bytes.
func readLimited(root, name string, max int64) ([]byte, error) {
	full, err := securejoin.SecureJoin(root, name)
	if err != nil {
		return nil, err
	}
	f, err := openRegular(full)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%s: larger than %d bytes", name, max)
	}
	return b, nil
}

// ld.so.cache, glibc's "new" format (glibc ≥ 2.32 writes only it; older
// ones append it to the old table): a 48-byte header, then 24-byte entries
// whose key and value are offsets of NUL-terminated strings from the
// header's start (glibc elf/cache.c, sysdeps/generic/dl-cache.h).
const (
	ldCacheMagic     = "glibc-ld.so.cache1.1"
	ldCacheHeader    = 48
	ldCacheEntry     = 24
	ldCacheTypeMask  = 0x00ff
	ldCacheELFLibc6  = 0x0003
	ldCacheArchMask  = 0xff00
	ldCacheX8664     = 0x0300
	ldCacheAArch64   = 0x0a00
	ldCacheMaxEntity = 1 << 20
)

// ParseLdCache returns the paths ld.so.cache gives for the wanted library
// names, for this architecture, in the cache's order (the loader's). A
// malformed cache yields what could be read before the fault.
func ParseLdCache(b []byte, names []string) []string {
	start := bytes.Index(b[:min(len(b), 1<<16)], []byte(ldCacheMagic))
	if start < 0 || len(b)-start < ldCacheHeader {
		return nil
	}
	c := b[start:]
	n := binary.LittleEndian.Uint32(c[20:24])
	arch := map[string]uint32{"amd64": ldCacheX8664, "arm64": ldCacheAArch64}[runtime.GOARCH]
	want := map[string]bool{}
	for _, w := range names {
		want[w] = true
	}
	str := func(off uint32) (string, bool) {
		if int(off) >= len(c) {
			return "", false
		}
		end := bytes.IndexByte(c[off:], 0)
		if end < 0 || end > 4096 {
			return "", false
		}
		return string(c[off : int(off)+end]), true
	}
	var out []string
	for i := uint32(0); i < n && i < ldCacheMaxEntity; i++ {
		e := ldCacheHeader + int(i)*ldCacheEntry
		if e+ldCacheEntry > len(c) {
			break
		}
		flags := binary.LittleEndian.Uint32(c[e:])
		if flags&ldCacheTypeMask != ldCacheELFLibc6 || (arch != 0 && flags&ldCacheArchMask != arch) {
			continue
		}
		key, ok := str(binary.LittleEndian.Uint32(c[e+4:]))
		if !ok || !want[key] {
			continue
		}
		if val, ok := str(binary.LittleEndian.Uint32(c[e+8:])); ok && path.IsAbs(val) {
			out = append(out, val)
		}
	}
	return out
}

// ReadEnviron reads a process's environment, bounded.
func ReadEnviron(pid int) []string {
	f, err := os.Open(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		return nil
	}
	defer f.Close()
	b, _ := io.ReadAll(io.LimitReader(f, maxEnvironSize))
	var env []string
	for _, kv := range bytes.Split(b, []byte{0}) {
		if len(kv) > 0 {
			env = append(env, string(kv))
		}
	}
	return env
}
