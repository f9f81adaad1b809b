package snapshot

import (
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strings"

	"github.com/cudatrace/cudatrace/nvdev/nvfile"
)

// LibraryFile is a libcuda or libnvidia-ml a traced process opened, as its
// file says: which driver version it is (its banner, else its name),
// whether it is the toolkit's stub, and what made the loader take it.
type LibraryFile struct {
	PID  int    `json:"pid"`
	Path string `json:"path"` // as opened
	// Resolved is the file Path's symlinks lead to, in the process's root.
	Resolved string `json:"resolved,omitempty"`
	// Version is the driver version the library is; VersionFrom says where
	// it was read: "contents" (its banner) or "name" (libcuda.so.580.159.04).
	Version     string `json:"version,omitempty"`
	VersionFrom string `json:"version_from,omitempty"`
	// Stub: the CUDA toolkit's link-time stub, by its contents.
	Stub bool  `json:"stub,omitempty"`
	Size int64 `json:"size,omitempty"`
	// LdCache: the process's /etc/ld.so.cache maps the library's name to
	// Path; LdConf is the ld.so.conf file that lists its directory.
	LdCache bool   `json:"ld_cache,omitempty"`
	LdConf  string `json:"ld_conf,omitempty"`
	// Mount is the mount the file lives on, when it is not the root's: a
	// container runtime's bind mount of the host's driver libraries.
	Mount *Mount `json:"mount,omitempty"`
	// Error says why the file could not be read (nothing above but Path).
	Error string `json:"error,omitempty"`
}

// Bounds on reading a library the target chose.
const (
	maxBannerScan = 8 << 20 // of .rodata: the banner is 0.6 MB in
	maxNoRodata   = 1 << 20 // of a file without .rodata (the stub has none)
	maxELFHeaders = 1 << 20 // the ELF and section headers and section names (libcuda's: ~3 KB)
	maxLdConfs    = 64
	maxLdConfSize = 64 << 10
)

// InspectLibrary reads the library p that process pid opened, resolved in
// its root, through the guarded reader: looked up O_PATH, read only when a
// regular file, within size limits and the guard's deadline. sameRoot says
// the process's root is cudatrace's: once the process is gone, p is read
// there instead.
func InspectLibrary(pid int, p string, sameRoot bool) LibraryFile {
	if !path.IsAbs(p) {
		// Relative to the process's cwd, not its root: not read.
		return LibraryFile{PID: pid, Path: p, Error: "a relative path, not read"}
	}
	g := &fsGuard{timeout: fsTimeout, what: "the target's files"}
	lf, err := guarded(g, func() (LibraryFile, error) {
		root := fmt.Sprintf("/proc/%d/root", pid)
		if _, err := os.Stat(root); err != nil && sameRoot {
			return inspectLibrary(pid, p, "/", false)
		}
		return inspectLibrary(pid, p, root, true)
	})
	if err != nil {
		lf = LibraryFile{PID: pid, Path: p, Error: err.Error()}
	}
	return lf
}

// inspectLibrary reads p in root; ownMounts: root is process pid's, whose
// mountinfo says what p lives on.
func inspectLibrary(pid int, p, root string, ownMounts bool) (LibraryFile, error) {
	lf := LibraryFile{PID: pid, Path: p}
	r, err := openRootFS(root)
	if err != nil {
		return lf, fmt.Errorf("its root: %w", err)
	}
	defer r.close()
	if err := readLibraryFile(r, &lf); err != nil {
		return lf, err
	}
	lf.LdCache, lf.LdConf = ldConfigEntry(r, lf.Path)
	if ownMounts {
		lf.Mount = libraryMount(pid, lf.Resolved)
	}
	return lf, nil
}

// readLibraryFile fills in what lf.Path's file says of itself: where its
// links lead, its size, version and whether it is the toolkit's stub.
func readLibraryFile(r *rootFS, lf *LibraryFile) error {
	p := lf.Path
	lf.Resolved = r.resolve(p)
	f, err := r.openFile(p)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }() // read-only: a failed close loses nothing
	if st, err := f.Stat(); err == nil {
		lf.Size = st.Size()
	}
	text, isELF := libraryText(f)
	if v := nvfile.LibraryVersion(text); v != "" {
		lf.Version, lf.VersionFrom = v, "contents"
	} else if m := libVersionRE.FindStringSubmatch(lf.Resolved); m != nil {
		lf.Version, lf.VersionFrom = m[1], "name"
	}
	base := path.Base(p)
	switch {
	case strings.HasPrefix(base, "libcuda.so"):
		lf.Stub = isELF && lf.VersionFrom != "contents" && lf.Size < nvfile.StubMaxSize
	case strings.HasPrefix(base, "libnvidia-ml.so"):
		lf.Stub = nvfile.IsNVMLStubText(text)
	}
	return nil
}

// libraryText is the part of an ELF library its banner is in: the start
// of .rodata, or of the file when it has none. A file that is not ELF
// gives its start, isELF false.
func libraryText(f *os.File) (text []byte, isELF bool) {
	r := io.NewSectionReader(f, 0, maxNoRodata)
	func() {
		defer func() { _ = recover() }() // debug/elf on hostile input: read the file's start instead
		// The headers through a read budget: debug/elf reads whole
		// sections the file's headers size (the section-name table), and
		// a hostile file can make one gigabytes long.
		ef, err := elf.NewFile(&budgetReaderAt{r: f, left: maxELFHeaders})
		if err != nil {
			return
		}
		isELF = true
		if s := ef.Section(".rodata"); s != nil && s.Type != elf.SHT_NOBITS {
			r = io.NewSectionReader(f, int64(s.Offset), min(int64(s.Size), maxBannerScan))
		}
	}()
	b, err := io.ReadAll(r)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, isELF
	}
	return b, isELF
}

// budgetReaderAt is r that fails once left bytes have been read.
type budgetReaderAt struct {
	r    io.ReaderAt
	left int64
}

func (b *budgetReaderAt) ReadAt(p []byte, off int64) (int, error) {
	if int64(len(p)) > b.left {
		return 0, errTooLarge
	}
	b.left -= int64(len(p))
	return b.r.ReadAt(p, off)
}

// ldConfigEntry reports whether the root's ld.so.cache maps p's name to p
// and, if so, which ld.so.conf file lists p's directory.
func ldConfigEntry(r *rootFS, p string) (cached bool, conf string) {
	cache, _, err := r.readFile("/etc/ld.so.cache", maxLdCache)
	if err != nil {
		return false, ""
	}
	hits, err := parseLdCache(cache, path.Base(p))
	if err != nil || !slices.Contains(hits, path.Clean(p)) {
		return false, ""
	}
	dir := path.Dir(path.Clean(p))
	files := []string{"/etc/ld.so.conf"}
	if names, err := r.readDir("/etc/ld.so.conf.d", maxLdConfs); err == nil {
		slices.Sort(names) // ldconfig reads them in this order
		for _, n := range names {
			if strings.HasSuffix(n, ".conf") {
				files = append(files, "/etc/ld.so.conf.d/"+n)
			}
		}
	}
	for _, c := range files {
		data, _, err := r.readFile(c, maxLdConfSize)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(data), "\n") {
			if line, _, _ = strings.Cut(line, "#"); path.Clean(strings.TrimSpace(line)) == dir {
				return true, c
			}
		}
	}
	return true, ""
}

// libraryMount is the mount of process pid that holds p, when it is not
// the root mount.
func libraryMount(pid int, p string) *Mount {
	g := &fsGuard{timeout: fsTimeout, what: "the target's files"}
	text, err := g.readString(fmt.Sprintf("/proc/%d/mountinfo", pid), maxFileSize)
	if err != nil {
		return nil
	}
	mounts := ParseMountinfo(text)
	if i := mountOf(mounts, p); i >= 0 && mounts[i].MountPoint != "/" {
		return &mounts[i]
	}
	return nil
}
