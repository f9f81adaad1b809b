package report

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// An -o path is one of two kinds. A regular file (or a new one) is
// replaced atomically. A character device or FIFO (/dev/null, a named pipe,
// a terminal) is written through: renaming a file over it, as root, would
// replace /dev/null itself.
//
// The path is looked at once, before the trace (OpenOutput): a launched
// target, perhaps another user, may change it while it runs (plant a FIFO
// that would block root's open forever, or a symlink to /dev/kmsg). So
// what the report is written to is fixed then:
//   - a file: the directory is opened then and kept; the report goes to a
//     new temporary file created in that directory (O_EXCL, no symlink
//     followed) and is renamed over the name there (renameat replaces the
//     entry whatever it has become, never writes through it). A directory
//     moved or swapped for a symlink meanwhile is not followed.
//   - a stream: the node is identified then (device and inode); at save
//     it is looked up O_PATH, must still be that node, and only then is
//     opened, non-blocking. A FIFO with no reader is waited for at most
//     fifoWait, and a reader that stops reading at most streamStall.
type target int

const (
	targetFile target = iota
	targetStream
)

// How long a stream may keep the save waiting: the report must not hang
// root cudatrace on a reader it does not control.
const (
	fifoWait    = 10 * time.Second
	streamStall = 30 * time.Second
)

// Output is a report destination vetted and fixed before the trace.
type Output struct {
	path string
	kind target
	dir  *os.File // targetFile: path's directory, opened at OpenOutput
	base string
	dev  uint64 // targetStream: the node's device and inode
	ino  uint64
	mode os.FileMode // 0: 0666 less the umask, as any file the user creates
	// unsynced: Save neither fsyncs the file nor the directory; the
	// caller makes its writes durable together (Unsynced).
	unsynced bool
}

// OpenOutput says, before a trace that may run for hours, whether the
// report can be written to path (its directory exists and takes new
// files; path is not a directory, a socket or a symlink to a regular
// file), and fixes what it will be written to. The error is one line
// naming path. Close the Output when done.
func OpenOutput(path string) (*Output, error) {
	if path == "" {
		return nil, errors.New("an empty output path: give a file name, or - for stdout")
	}
	kind, err := classify(path)
	if err != nil {
		return nil, err
	}
	o := &Output{path: path, kind: kind}
	if kind == targetStream {
		if err := unix.Access(path, unix.W_OK); err != nil {
			return nil, fmt.Errorf("%s: cannot write: %w", path, err)
		}
		var st unix.Stat_t
		if err := unix.Stat(path, &st); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		o.dev, o.ino = st.Dev, st.Ino
		return o, nil
	}
	dirName := filepath.Dir(path)
	o.base = filepath.Base(path)
	d, err := os.OpenFile(dirName, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, dirError(path, dirName, err)
	}
	o.dir = d
	// Create and remove a file where Save will create its temporary one:
	// the only test that sees read-only mounts, quotas, NFS root squash
	// and the rest the way the real write will.
	f, name, err := o.createTemp()
	if err != nil {
		o.Close()
		return nil, err
	}
	closeErr := f.Close()
	if err := unix.Unlinkat(int(d.Fd()), name, 0); err != nil {
		o.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if closeErr != nil {
		o.Close()
		return nil, closeErr
	}
	return o, nil
}

// OpenOutputIn fixes a report destination named base in the already open
// directory dir, with the given file mode (not subject to the umask).
func OpenOutputIn(dir *os.File, base string, mode os.FileMode) *Output {
	return &Output{path: filepath.Join(dir.Name(), base), kind: targetFile, dir: dir, base: base, mode: mode}
}

// Unsynced makes Save skip its two fsyncs (the file's, then the
// directory's): for a caller that writes many reports and syncs their file
// system itself, once for many (watch's --report-dir). Until then a crash
// may leave the report empty or cut at its name, never another file.
func (o *Output) Unsynced() *Output {
	o.unsynced = true
	return o
}

// Close releases what OpenOutput opened.
func (o *Output) Close() {
	if o != nil && o.dir != nil {
		_ = o.dir.Close() // a directory opened to create in: nothing to lose
		o.dir = nil
	}
}

// Path is the path as given.
func (o *Output) Path() string { return o.path }

// CheckOutput is OpenOutput for a path that will be saved with Save.
func CheckOutput(path string) error {
	o, err := OpenOutput(path)
	o.Close()
	return err
}

// classify looks at what is at path now.
func classify(path string) (target, error) {
	st, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return targetFile, nil
	}
	if err != nil {
		return 0, err
	}
	mode := st.Mode()
	if mode&fs.ModeSymlink != 0 {
		// Follow it only to a stream (/dev/stdout to a terminal or pipe):
		// replacing the link, or writing through it into some file, as root
		// is how a report ends up over a file it was never meant to touch.
		t, err := os.Stat(path)
		if err != nil {
			return 0, fmt.Errorf("%s: dangling symlink", path)
		}
		if isStream(t.Mode()) {
			return targetStream, nil
		}
		dest, _ := os.Readlink(path)
		return 0, fmt.Errorf("%s is a symlink (to %s): give the real path", path, dest)
	}
	switch {
	case mode.IsRegular():
		return targetFile, nil
	case mode.IsDir():
		return 0, fmt.Errorf("%s is a directory: give a file name, e.g. %s", path, filepath.Join(path, "report.json"))
	case isStream(mode):
		return targetStream, nil
	}
	return 0, fmt.Errorf("%s is not a regular file, character device or FIFO (%s)", path, typeName(mode))
}

func isStream(m fs.FileMode) bool {
	return m&fs.ModeCharDevice != 0 || m&fs.ModeNamedPipe != 0
}

func typeName(m fs.FileMode) string {
	switch {
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeDevice != 0:
		return "a block device"
	}
	return m.Type().String()
}

// createTemp creates the temporary file Save renames over the name, in
// the directory opened at OpenOutput. Unlike os.CreateTemp (always 0600)
// it is created 0666 less the umask, so the report gets the mode any file
// the user creates gets, unless the Output has a mode of its own.
func (o *Output) createTemp() (*os.File, string, error) {
	for range 100 {
		name := "." + o.base + ".tmp" + strconv.FormatUint(uint64(rand.Uint32()), 10)
		perm := uint32(0o666)
		if o.mode != 0 {
			perm = uint32(o.mode.Perm())
		}
		fd, err := unix.Openat(int(o.dir.Fd()), name, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, perm)
		if errors.Is(err, unix.EEXIST) {
			continue
		}
		if err != nil {
			return nil, "", dirError(o.path, filepath.Dir(o.path), err)
		}
		if o.mode != 0 {
			// The umask applied at creation; the mode asked for is exact.
			if err := unix.Fchmod(fd, perm); err != nil {
				_ = unix.Close(fd)
				_ = unix.Unlinkat(int(o.dir.Fd()), name, 0)
				return nil, "", fmt.Errorf("%s: %w", o.path, err)
			}
		}
		return os.NewFile(uintptr(fd), filepath.Join(filepath.Dir(o.path), name)), name, nil
	}
	return nil, "", fmt.Errorf("%s: cannot create a temporary file in %s", o.path, filepath.Dir(o.path))
}

// dirError words a failure to create a file in dir.
func dirError(path, dir string, err error) error {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if st, serr := os.Stat(dir); serr == nil && st.IsDir() {
			// /proc and /sys directories exist but take no new files.
			return fmt.Errorf("%s: %s takes no new files (a kernel file system?)", path, dir)
		}
		return fmt.Errorf("%s: directory %s does not exist", path, dir)
	case errors.Is(err, unix.EROFS):
		return fmt.Errorf("%s: %s is on a read-only file system", path, dir)
	case errors.Is(err, fs.ErrPermission):
		return fmt.Errorf("%s: no permission to create files in %s", path, dir)
	case errors.Is(err, unix.ENOTDIR):
		return fmt.Errorf("%s: %s is not a directory", path, dir)
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return fmt.Errorf("%s: cannot create a file in %s: %w", path, dir, err)
}

// Save writes the report to path (see Output). It is OpenOutput and
// Output.Save at once, for a path nothing else can change meanwhile.
func Save(path string, rep *Report) error {
	o, err := OpenOutput(path)
	if err != nil {
		return err
	}
	defer o.Close()
	_, err = o.Save(rep)
	return err
}

// Save writes the report where OpenOutput fixed. A file is replaced
// atomically: a temporary file in the directory first opened, fsynced,
// then renamed over the name there, so a crash never leaves half a report.
// A stream is written through. moved, when not "", says where the report
// went instead of the path as given: its directory was moved meanwhile.
func (o *Output) Save(rep *Report) (moved string, err error) {
	if o.kind == targetStream {
		return "", o.writeStream(rep)
	}
	tmp, name, err := o.createTemp()
	if err != nil {
		return "", err
	}
	dfd := int(o.dir.Fd())
	renamed := false
	defer func() {
		if !renamed {
			_ = unix.Unlinkat(dfd, name, 0)
		}
	}()
	if err := WriteJSON(tmp, rep); err != nil {
		_ = tmp.Close()
		return "", fmt.Errorf("%s: %w", o.path, err)
	}
	if err := o.sync(tmp); err != nil {
		_ = tmp.Close()
		return "", fmt.Errorf("%s: %w", o.path, err)
	}
	if err := tmp.Close(); err != nil {
		return "", fmt.Errorf("%s: %w", o.path, err)
	}
	// renameat replaces the entry, whatever it has become since
	// OpenOutput (a FIFO, a symlink, a device node planted there): it
	// never opens or writes through it. A directory there is refused.
	if err := unix.Renameat(dfd, name, dfd, o.base); err != nil {
		if errors.Is(err, unix.EISDIR) || errors.Is(err, unix.ENOTEMPTY) || errors.Is(err, unix.EEXIST) {
			return "", fmt.Errorf("%s changed into a directory while tracing: not replaced", o.path)
		}
		return "", fmt.Errorf("%s: %w", o.path, err)
	}
	renamed = true
	// Make the rename itself durable; the report is complete either way,
	// so a directory that cannot be synced is not an error.
	_ = o.sync(o.dir)
	return o.movedTo(), nil
}

func (o *Output) sync(f *os.File) error {
	if o.unsynced {
		return nil
	}
	return f.Sync()
}

// movedTo says where the directory opened at OpenOutput is now, when the
// path as given no longer leads to it; "" when it does.
func (o *Output) movedTo() string {
	var want, now unix.Stat_t
	if unix.Fstat(int(o.dir.Fd()), &want) != nil {
		return ""
	}
	if unix.Stat(filepath.Dir(o.path), &now) == nil && now.Dev == want.Dev && now.Ino == want.Ino {
		return ""
	}
	dir, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(int(o.dir.Fd())))
	if err != nil {
		dir = "a directory no longer reachable by that path"
	}
	return filepath.Join(dir, o.base)
}

// writeStream writes through to the character device or FIFO identified
// at OpenOutput: looked up O_PATH (an open could run a device's open
// routine, or block on a FIFO), checked to be that same node, then
// opened non-blocking.
func (o *Output) writeStream(rep *Report) error {
	h, err := os.OpenFile(o.path, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer func() { _ = h.Close() }() // O_PATH: nothing to lose
	var st unix.Stat_t
	if err := unix.Fstat(int(h.Fd()), &st); err != nil {
		return fmt.Errorf("%s: %w", o.path, err)
	}
	if st.Dev != o.dev || st.Ino != o.ino {
		return fmt.Errorf("%s changed while tracing: not written", o.path)
	}
	reopen := "/proc/self/fd/" + strconv.Itoa(int(h.Fd()))
	flags := unix.O_WRONLY | unix.O_NONBLOCK | unix.O_NOCTTY | unix.O_CLOEXEC
	var fd int
	for deadline := time.Now().Add(fifoWait); ; {
		fd, err = unix.Open(reopen, flags, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if !errors.Is(err, unix.ENXIO) || st.Mode&unix.S_IFMT != unix.S_IFIFO {
			break
		}
		// A FIFO with no reader yet.
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: a FIFO nobody read within %v: not written", o.path, fifoWait)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", o.path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFIFO {
		// A device's writes block as its driver says; only the open had to
		// be non-blocking (a FIFO keeps O_NONBLOCK: the poller's deadlines).
		if err := unix.SetNonblock(fd, false); err != nil {
			_ = unix.Close(fd)
			return fmt.Errorf("%s: %w", o.path, err)
		}
	}
	f := os.NewFile(uintptr(fd), o.path)
	w := &stallWriter{f: f}
	if err := WriteJSON(w, rep); err != nil {
		_ = f.Close()
		return fmt.Errorf("%s: %w", o.path, err)
	}
	return f.Close()
}

// stallWriter gives up on a stream that takes nothing for streamStall.
type stallWriter struct{ f *os.File }

func (w *stallWriter) Write(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		// A character device has no poller: this fails and its writes
		// block as the device's do.
		_ = w.f.SetWriteDeadline(time.Now().Add(streamStall))
		m, err := w.f.Write(p[n:min(len(p), n+64<<10)])
		n += m
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return n, fmt.Errorf("the reader took nothing for %v", streamStall)
		}
		if err != nil {
			return n, err
		}
	}
	return n, nil
}
