package snapshot

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/cudatrace/cudatrace/nvdev/nvfile"
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

// CloseAll closes files a caller will not probe after all.
func CloseAll(libs []*LibFile) {
	for _, l := range libs {
		_ = l.Close() // read-only: a failed close loses nothing
	}
}

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

// Bounds on what the target controls: its environment, its library paths.
const (
	maxLibDirs  = 64
	maxLibFiles = 32
)

// OpenCUDALibraries opens every libcuda and libnvidia-ml a process with
// this root directory (e.g. /proc/PID/root) and LD_LIBRARY_PATH would find, as
// its dynamic loader searches: LD_LIBRARY_PATH, /etc/ld.so.cache, the
// default and NVIDIA directories. Paths resolve inside root (openat2
// RESOLVE_IN_ROOT), so a symlink cannot lead outside it; only regular
// files are opened, without blocking. A file seen already is skipped.
func OpenCUDALibraries(root, ldLibraryPath string) []*LibFile {
	r, err := openRootFS(root)
	if err != nil {
		return nil
	}
	defer r.close()
	var dirs []string
	for _, d := range strings.Split(ldLibraryPath, ":") {
		if d != "" && path.IsAbs(d) { // relative entries depend on the cwd
			dirs = append(dirs, path.Clean(d))
		}
	}
	if len(dirs) > maxLibDirs {
		dirs = dirs[:maxLibDirs]
	}
	cache, _, cacheErr := r.readFile("/etc/ld.so.cache", maxLdCache)
	// Per name, the file the loader would take: the first that exists, in
	// its order. Other copies (a compat or stub libcuda further down) are
	// probed only if the target opens them: each probed file costs a link
	// to attach and to close, and a probe on the 100 MB libcuda is not free.
	var first []string
	for _, n := range cudaLibNames {
		var candidates []string
		for _, d := range dirs {
			candidates = append(candidates, path.Join(d, n))
		}
		if cacheErr == nil {
			if paths, err := parseLdCache(cache, n); err == nil {
				candidates = append(candidates, paths...)
			}
		}
		for _, d := range libDirs() {
			candidates = append(candidates, path.Join(d, n))
		}
		for _, c := range candidates {
			if r.isFile(c) {
				first = append(first, c)
				break
			}
		}
	}
	return openUnique(r, first)
}

// OpenMappedLibraries opens the libcuda and libnvidia-ml files mapped into
// a running process, through /proc/PID/map_files, so a library replaced on
// disk since is still the one probed.
func OpenMappedLibraries(pid int) []*LibFile {
	f, err := os.Open(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return nil
	}
	defer func() { _ = f.Close() }() // read-only: a failed close loses nothing
	seen := map[[2]uint64]bool{}
	var out []*LibFile
	sc := bufio.NewScanner(io.LimitReader(f, 64<<20))
	sc.Buffer(make([]byte, 0, 64<<10), 64<<10)
	for sc.Scan() && len(out) < maxLibFiles {
		// start-end perms offset dev inode path
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || !nvfile.IsLibrary(fields[5]) {
			continue
		}
		lf, err := OpenRegular(fmt.Sprintf("/proc/%d/map_files/%s", pid, fields[0]))
		if err != nil {
			continue
		}
		id, ok := fileID(lf)
		if !ok || seen[id] {
			_ = lf.Close() // read-only: a failed close loses nothing
			continue
		}
		seen[id] = true
		out = append(out, &LibFile{File: lf, Path: strings.Join(fields[5:], " ")})
	}
	return out
}

func openUnique(r *rootFS, candidates []string) []*LibFile {
	seenPath := map[string]bool{}
	seenFile := map[[2]uint64]bool{}
	var out []*LibFile
	for _, c := range candidates {
		if seenPath[c] || len(out) >= maxLibFiles {
			continue
		}
		seenPath[c] = true
		f, err := r.openFile(c)
		if err != nil {
			continue
		}
		id, ok := fileID(f)
		if !ok || seenFile[id] {
			_ = f.Close() // read-only: a failed close loses nothing
			continue
		}
		seenFile[id] = true
		out = append(out, &LibFile{File: f, Path: c})
	}
	return out
}

func fileID(f *os.File) ([2]uint64, bool) {
	var st unix.Stat_t
	if unix.Fstat(int(f.Fd()), &st) != nil {
		return [2]uint64{}, false
	}
	return [2]uint64{st.Dev, st.Ino}, true
}
