package ebpftrace

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// tracefsDir is where we mount tracefs when nobody has: the syscall
// tracepoints' ids are only published there.
const tracefsDir = "/sys/kernel/tracing"

// stateDir holds the locks that let several cudatrace processes share one
// tracefs mount: the last one out unmounts it, and only if a cudatrace
// mounted it. /run is emptied at boot, like the mount table.
var stateDir = "/run/cudatrace"

const (
	stateLock = "tracefs.lock"    // held (exclusive) while deciding to mount or unmount
	usersLock = "tracefs.users"   // held (shared) by every process using the mount
	marker    = "tracefs.mounted" // exists while a cudatrace-made mount exists
)

// acquireTracefs makes sure tracefs is reachable and returns the function
// that undoes whatever it did, once no other cudatrace uses it.
func acquireTracefs() (release func() error, err error) {
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return nil, fmt.Errorf("tracefs state directory: %w", err)
	}
	state, err := lockFile(filepath.Join(stateDir, stateLock), unix.LOCK_EX)
	if err != nil {
		return nil, err
	}
	defer state.Close() // unlocks
	present, err := tracefsPresent("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	if !present {
		if err := unix.Mount("tracefs", tracefsDir, "tracefs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
			if errors.Is(err, unix.EPERM) {
				return nil, unavailable("tracefs is not mounted and mounting it needs CAP_SYS_ADMIN")
			}
			return nil, fmt.Errorf("mount tracefs on %s: %w", tracefsDir, err)
		}
		if err := os.WriteFile(filepath.Join(stateDir, marker), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o600); err != nil {
			unix.Unmount(tracefsDir, 0)
			return nil, fmt.Errorf("record tracefs mount: %w", err)
		}
	}
	users, err := lockFile(filepath.Join(stateDir, usersLock), unix.LOCK_SH)
	if err != nil {
		return nil, err
	}
	done := false
	return func() error {
		if done {
			return nil
		}
		done = true
		return releaseTracefs(users)
	}, nil
}

func releaseTracefs(users *os.File) error {
	defer users.Close()
	state, err := lockFile(filepath.Join(stateDir, stateLock), unix.LOCK_EX)
	if err != nil {
		return err
	}
	defer state.Close()
	// Upgrading our shared lock succeeds only if no one else holds one.
	if unix.Flock(int(users.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil {
		return nil // another cudatrace still traces; the last one unmounts
	}
	if _, err := os.Stat(filepath.Join(stateDir, marker)); err != nil {
		return nil // not ours to unmount
	}
	err = unix.Unmount(tracefsDir, 0)
	if errors.Is(err, unix.EBUSY) {
		// Someone is using it (a shell cd'ed into it): detach it anyway.
		err = unix.Unmount(tracefsDir, unix.MNT_DETACH)
	}
	if err != nil && !errors.Is(err, unix.EINVAL) { // EINVAL: unmounted meanwhile
		return fmt.Errorf("unmount tracefs from %s: %w", tracefsDir, err)
	}
	os.Remove(filepath.Join(stateDir, marker))
	return nil
}

func lockFile(path string, how int) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("tracefs lock: %w", err)
	}
	for {
		err = unix.Flock(int(f.Fd()), how)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return f, nil
}

// tracefsPresent reports whether tracefs is mounted anywhere, or debugfs with
// its tracing directory (the places cilium/ebpf looks).
func tracefsPresent(mountinfo string) (bool, error) {
	f, err := os.Open(mountinfo)
	if err != nil {
		return false, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		root, mnt, fstype, ok := parseMountinfoLine(sc.Text())
		if !ok || root != "/" {
			continue
		}
		switch fstype {
		case "tracefs":
			return true, nil
		case "debugfs":
			if fi, err := os.Stat(filepath.Join(mnt, "tracing")); err == nil && fi.IsDir() {
				return true, nil
			}
		}
	}
	return false, sc.Err()
}

// parseMountinfoLine extracts root, mount point and filesystem type from a
// /proc/PID/mountinfo line.
func parseMountinfoLine(line string) (root, mnt, fstype string, ok bool) {
	pre, post, found := strings.Cut(line, " - ")
	if !found {
		return "", "", "", false
	}
	f := strings.Fields(pre)
	g := strings.Fields(post)
	if len(f) < 5 || len(g) < 1 {
		return "", "", "", false
	}
	return unescapeMount(f[3]), unescapeMount(f[4]), g[0], true
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, ok := octal3(s[i+1 : i+4]); ok {
				b.WriteByte(v)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func octal3(s string) (byte, bool) {
	var v int
	for _, c := range s {
		if c < '0' || c > '7' {
			return 0, false
		}
		v = v*8 + int(c-'0')
	}
	return byte(v), v < 256
}
