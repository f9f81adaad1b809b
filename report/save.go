package report

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// An -o path is one of two kinds. A regular file (or a new one) is
// replaced atomically. A character device or FIFO (/dev/null, a named pipe,
// a terminal) is written through: renaming a file over it, as root, would
// replace /dev/null itself.
type target int

const (
	targetFile target = iota
	targetStream
)

// CheckOutput says, before a trace that may run for hours, whether Save
// can write path: its directory exists and takes new files, and path is
// not a directory, a socket or a symlink to a regular file. The error is
// one line naming path.
func CheckOutput(path string) error {
	kind, err := classify(path)
	if err != nil {
		return err
	}
	if kind == targetStream {
		if err := unix.Access(path, unix.W_OK); err != nil {
			return fmt.Errorf("%s: cannot write: %w", path, err)
		}
		return nil
	}
	// Create and remove a file where Save will create its temporary one:
	// the only test that sees read-only mounts, quotas, NFS root squash
	// and the rest the way the real write will.
	f, err := createTemp(path)
	if err != nil {
		return err
	}
	name := f.Name()
	closeErr := f.Close()
	if err := os.Remove(name); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return closeErr
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

// createTemp creates the temporary file Save renames over path, in path's
// directory. Unlike os.CreateTemp (always 0600) it is created 0666 less
// the umask, so the report gets the mode any file the user creates gets.
func createTemp(path string) (*os.File, error) {
	dir, base := filepath.Dir(path), filepath.Base(path)
	for range 100 {
		name := filepath.Join(dir, "."+base+".tmp"+strconv.FormatUint(uint64(rand.Uint32()), 10))
		f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o666)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return nil, dirError(path, dir, err)
		}
		return f, nil
	}
	return nil, fmt.Errorf("%s: cannot create a temporary file in %s", path, dir)
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

// Save writes the report to path. A regular file is replaced atomically:
// a temporary file in the same directory, fsynced, then renamed over path,
// so a crash never leaves half a report. A character device or FIFO is
// written through. Anything else is refused (see CheckOutput).
func Save(path string, rep *Report) error {
	kind, err := classify(path)
	if err != nil {
		return err
	}
	if kind == targetStream {
		return writeStream(path, rep)
	}
	tmp, err := createTemp(path)
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(tmp.Name()) }() // a no-op after a successful rename
	if err := WriteJSON(tmp, rep); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	// What is at path may have changed since classify; rename replaces a
	// regular file or nothing, never a node.
	if now, err := classify(path); err != nil {
		return err
	} else if now != targetFile {
		return fmt.Errorf("%s changed into a device or FIFO while tracing: not replaced", path)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	// Make the rename itself durable; the report is complete either way,
	// so a directory that cannot be synced is not an error.
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return nil
}

// writeStream writes through to a character device or FIFO, checking
// after the open that it still is one.
func writeStream(path string, rep *Report) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	st, err := f.Stat()
	if err != nil || !isStream(st.Mode()) {
		_ = f.Close()
		return fmt.Errorf("%s changed while tracing: not written", path)
	}
	if err := WriteJSON(f, rep); err != nil {
		_ = f.Close()
		return fmt.Errorf("%s: %w", path, err)
	}
	return f.Close()
}
