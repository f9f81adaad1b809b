package snapshot

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
	"sync/atomic"
	"time"

	securejoin "github.com/cyphar/filepath-securejoin"
	"golang.org/x/sys/unix"

	"github.com/cudatrace/cudatrace/internal/sysabi"
)

// Collect runs as root against a target it does not trust. The target
// shapes what is under /proc/PID/root (in its own user and mount namespace
// it can bind-mount a FIFO or /dev/zero over /etc/passwd, plant symlinks
// that point out of its root, or serve the files from FUSE) and the size of
// what /proc shows about it (environ, mountinfo). So every read goes
// through this file:
//
//   - paths under the target's root are resolved inside that root
//     (securejoin: openat2 RESOLVE_IN_ROOT|RESOLVE_NO_MAGICLINKS where the
//     kernel has it, an equivalent walk where it does not), so a symlink
//     never leads to a host file;
//   - a file is looked up O_PATH, which opens nothing, and fstat'ed: only a
//     regular file is then opened, non-blocking, so a FIFO cannot block and
//     a device's open (a watchdog's, a tape's) never runs;
//   - reads stop at a size limit, directory listings at an entry limit;
//   - each operation runs under a deadline, because a FUSE server can stall
//     any lookup; after one has hung, the rest of the target's files are
//     skipped rather than waited for again.

// Size limits. Real files are far smaller: a host's mountinfo is tens of
// KB with thousands of mounts, environ is bounded by the exec limit, a
// status with the most supplementary groups (65536) is under 400 KB.
const (
	maxFileSize = 4 << 20 // any file
	maxDirNames = 16384   // a /dev with more entries than this is hostile
)

// fsTimeout bounds one filesystem operation on the target's files.
const fsTimeout = 3 * time.Second

var (
	errTooLarge = errors.New("larger than the size limit")
	errHung     = errors.New("hung")
)

// notRegularError says what a path turned out to be instead of a file.
type notRegularError struct{ kind string }

func (e notRegularError) Error() string { return "refused: a " + e.kind + ", not a regular file" }

// timeoutError is an operation that did not finish in time; it is left
// running (a hung FUSE request cannot be cancelled) and its result dropped.
type timeoutError struct{ after time.Duration }

func (e timeoutError) Error() string {
	return fmt.Sprintf("did not finish within %v (a hung file system?)", e.after)
}

// fsGuard runs filesystem operations under a deadline. The collector has
// one for the target's root and one for everything else, so that a hang
// in the target's files costs only those.
type fsGuard struct {
	timeout time.Duration
	what    string // "the target's files"
	hung    atomic.Bool
}

// guarded runs f under g's deadline. Once an earlier operation timed out
// it returns an error wrapping errHung without running f.
func guarded[T any](g *fsGuard, f func() (T, error)) (T, error) {
	var zero T
	if g.hung.Load() {
		return zero, fmt.Errorf("skipped: an earlier read of %s %w", g.what, errHung)
	}
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1) // buffered: a late f must not block forever
	go func() {
		v, err := f()
		done <- result{v, err}
	}()
	t := time.NewTimer(g.timeout)
	defer t.Stop()
	select {
	case r := <-done:
		return r.v, r.err
	case <-t.C:
		g.hung.Store(true)
		return zero, timeoutError{g.timeout}
	}
}

// readFile reads a regular file of at most limit bytes. With a too large
// file it returns the first limit bytes and an error wrapping errTooLarge.
func (g *fsGuard) readFile(name string, limit int64) ([]byte, error) {
	return guarded(g, func() ([]byte, error) {
		h, err := os.OpenFile(name, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, err
		}
		defer func() { _ = h.Close() }() // read-only: a failed close loses nothing
		return readHandle(h, limit)
	})
}

// readString is readFile as a string.
func (g *fsGuard) readString(name string, limit int64) (string, error) {
	b, err := g.readFile(name, limit)
	return string(b), err
}

// readFileInRoot reads name (absolute, as the target sees it) resolved
// inside root (/proc/PID/root), following symlinks only within it.
func (g *fsGuard) readFileInRoot(root, name string, limit int64) ([]byte, error) {
	return guarded(g, func() ([]byte, error) {
		h, err := openInRoot(root, name)
		if err != nil {
			return nil, err
		}
		defer func() { _ = h.Close() }() // read-only: a failed close loses nothing
		return readHandle(h, limit)
	})
}

// existsInRoot reports whether name resolves to something inside root.
func (g *fsGuard) existsInRoot(root, name string) bool {
	ok, _ := guarded(g, func() (bool, error) {
		h, err := openInRoot(root, name)
		if err != nil {
			return false, err
		}
		_ = h.Close() // read-only: a failed close loses nothing
		return true, nil
	})
	return ok
}

// readDirNames lists the directory dir inside root, at most maxDirNames
// entries (with errTooLarge when there were more).
func (g *fsGuard) readDirNames(root, dir string) ([]string, error) {
	return guarded(g, func() ([]string, error) {
		h, err := openInRoot(root, dir)
		if err != nil {
			return nil, err
		}
		defer func() { _ = h.Close() }() // read-only: a failed close loses nothing
		var st unix.Stat_t
		if err := unix.Fstat(int(h.Fd()), &st); err != nil {
			return nil, err
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			return nil, unix.ENOTDIR
		}
		d, err := reopen(h, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NONBLOCK)
		if err != nil {
			return nil, err
		}
		defer func() { _ = d.Close() }() // read-only: a failed close loses nothing
		names, err := d.Readdirnames(maxDirNames + 1)
		if errors.Is(err, io.EOF) {
			err = nil
		}
		if len(names) > maxDirNames {
			return names[:maxDirNames], fmt.Errorf("more than %d entries: %w", maxDirNames, errTooLarge)
		}
		return names, err
	})
}

// lstatInRoot describes name inside root without following it if it is
// a symlink (its directory is resolved inside root), and reads the link's
// destination when it is one.
func (g *fsGuard) lstatInRoot(root, name string) (unix.Stat_t, string, error) {
	type res struct {
		st   unix.Stat_t
		dest string
	}
	r, err := guarded(g, func() (res, error) {
		var r res
		dir, base := path.Split(path.Clean("/" + name))
		if base == "" {
			base = "."
		}
		h, err := openInRoot(root, dir)
		if err != nil {
			return r, err
		}
		defer func() { _ = h.Close() }() // read-only: a failed close loses nothing
		if err := unix.Fstatat(int(h.Fd()), base, &r.st, unix.AT_SYMLINK_NOFOLLOW|unix.AT_EMPTY_PATH); err != nil {
			return r, err
		}
		if r.st.Mode&unix.S_IFMT == unix.S_IFLNK {
			buf := make([]byte, unix.PathMax)
			n, err := unix.Readlinkat(int(h.Fd()), base, buf)
			if err == nil {
				r.dest = string(buf[:n])
			}
		}
		return r, nil
	})
	return r.st, r.dest, err
}

// openInRoot looks name up inside root, O_PATH (nothing is opened).
func openInRoot(root, name string) (*os.File, error) {
	rootDir, err := os.OpenFile(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer func() { _ = rootDir.Close() }() // read-only: a failed close loses nothing
	rel := strings.TrimLeft(path.Clean("/"+name), "/")
	if rel == "" {
		rel = "."
	}
	return securejoin.OpenatInRoot(rootDir, rel)
}

// reopen opens the file behind the O_PATH handle h for real. Its errors
// are plain path errors, as os.Open's: the caller's context names the file.
func reopen(h *os.File, flags int) (*os.File, error) {
	f, err := securejoin.Reopen(h, flags)
	var errno unix.Errno
	if err != nil && errors.As(err, &errno) {
		return nil, &os.PathError{Op: "open", Path: h.Name(), Err: errno}
	}
	return f, err
}

// openHandle opens the file behind the O_PATH handle h for reading, when
// it is a regular file: the one guarded way cudatrace opens a file the
// target may have planted (a FIFO, /dev/zero, /dev/ptmx or a watchdog bound
// over /etc/group or ld.so.cache). The lookup opened nothing; fstat on the
// handle says what it is; only a regular file is then opened, through
// /proc/self/fd (the inode the handle holds, not the path again), without
// blocking and without taking a controlling terminal.
func openHandle(h *os.File) (*os.File, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(h.Fd()), &st); err != nil {
		return nil, err
	}
	if k := fileKind(st.Mode); k != "" {
		return nil, notRegularError{k}
	}
	return reopen(h, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY)
}

// OpenRegular opens the regular file at p (an absolute path: a
// /proc/PID/map_files or /proc/PID/fd entry, whose magic link the O_PATH
// lookup follows to the target's file) through openHandle: a device the
// target opened under a library's name is never opened again by root.
func OpenRegular(p string) (*os.File, error) {
	h, err := os.OpenFile(p, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer func() { _ = h.Close() }() // O_PATH: nothing to lose
	return openHandle(h)
}

// readHandle reads the O_PATH handle h when it is a regular file, at most
// limit bytes; with more it returns those and an error wrapping
// errTooLarge.
func readHandle(h *os.File, limit int64) ([]byte, error) {
	f, err := openHandle(h)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }() // read-only: a failed close loses nothing
	// Files in /proc and /sys report size 0: read up to the limit, not st.Size.
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return b[:limit], fmt.Errorf("%w (%d bytes)", errTooLarge, limit)
	}
	return b, nil
}

// fileKind names a file type other than a regular file; "" for one.
func fileKind(mode uint32) string {
	t, ok := sysabi.FileTypeOf(mode)
	switch {
	case !ok:
		return "special file"
	case t.Mode == unix.S_IFREG:
		return ""
	}
	return t.Noun
}
