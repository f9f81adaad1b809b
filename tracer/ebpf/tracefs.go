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

// tracefsDir is where we mount tracefs when nobody has. The BTF
// tracepoints used now do not need it (per-syscall tracepoints' ids are
// published only there); it is still held while tracing.
const tracefsDir = "/sys/kernel/tracing"

// stateDir holds the locks that let several cudatrace processes share one
// tracefs mount: the last one out unmounts it, and only if a cudatrace
// mounted it. /run is emptied at boot, like the mount table.
var stateDir = "/run/cudatrace"

// Mounts belong to a mount namespace, so the state is kept per namespace:
// a cudatrace in a private namespace (unshare --mount, a container) must
// neither wait for nor unmount the host's tracefs, nor the other way round.
const (
	stateLock = "tracefs-%d.lock"    // held (exclusive) while deciding to mount or unmount
	usersLock = "tracefs-%d.users"   // held (shared) by every process using the mount
	marker    = "tracefs-%d.mounted" // the mount ID of a tracefs a cudatrace mounted
)

// tracefsState names the state files of the current mount namespace.
type tracefsState struct{ lock, users, marker string }

func currentTracefsState() (tracefsState, error) {
	var st unix.Stat_t
	if err := unix.Stat("/proc/self/ns/mnt", &st); err != nil {
		return tracefsState{}, fmt.Errorf("mount namespace: %w", err)
	}
	f := func(pattern string) string { return filepath.Join(stateDir, fmt.Sprintf(pattern, st.Ino)) }
	return tracefsState{lock: f(stateLock), users: f(usersLock), marker: f(marker)}, nil
}

// acquireTracefs makes sure tracefs is reachable and returns the function
// that undoes whatever it did, once no other cudatrace in this mount
// namespace uses it.
func acquireTracefs() (release func() error, err error) {
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return nil, fmt.Errorf("tracefs state directory: %w", err)
	}
	names, err := currentTracefsState()
	if err != nil {
		return nil, err
	}
	state, err := lockFile(names.lock, unix.LOCK_EX)
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
		// The mount ID says which mount is ours: a marker left by a
		// crashed run (or a reused namespace inode) cannot point at a
		// mount someone else made.
		id, err := tracefsMountID("/proc/self/mountinfo")
		if err == nil {
			err = os.WriteFile(names.marker, []byte(strconv.Itoa(id)+"\n"), 0o600)
		}
		if err != nil {
			unix.Unmount(tracefsDir, 0)
			return nil, fmt.Errorf("record tracefs mount: %w", err)
		}
	}
	users, err := lockFile(names.users, unix.LOCK_SH)
	if err != nil {
		return nil, err
	}
	done := false
	return func() error {
		if done {
			return nil
		}
		done = true
		return releaseTracefs(names, users)
	}, nil
}

func releaseTracefs(names tracefsState, users *os.File) error {
	defer users.Close()
	state, err := lockFile(names.lock, unix.LOCK_EX)
	if err != nil {
		return err
	}
	defer state.Close()
	// Upgrading our shared lock succeeds only if no one else holds one.
	if unix.Flock(int(users.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil {
		return nil // another cudatrace still traces; the last one unmounts
	}
	if err := unmountOurs(names.marker); err != nil {
		return err
	}
	// Last user: remove the namespace's files, so that namespaces that come
	// and go leave nothing. Whoever opened them meanwhile sees, once it has
	// the lock, that the name is gone and starts again (lockFile). The users
	// file goes first: it is only opened with the state lock held.
	os.Remove(names.marker)
	os.Remove(names.users)
	os.Remove(names.lock)
	return nil
}

// unmountOurs unmounts the tracefs on tracefsDir if it is the mount the
// marker names.
func unmountOurs(markerPath string) error {
	b, err := os.ReadFile(markerPath)
	if err != nil {
		return nil // no cudatrace mounted one: not ours to unmount
	}
	want, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return nil
	}
	if id, err := tracefsMountID("/proc/self/mountinfo"); err != nil || id != want {
		return nil // unmounted meanwhile, or replaced by someone else's
	}
	err = unix.Unmount(tracefsDir, 0)
	if errors.Is(err, unix.EBUSY) {
		// Someone is using it (a shell cd'ed into it): detach it anyway.
		err = unix.Unmount(tracefsDir, unix.MNT_DETACH)
	}
	if err != nil && !errors.Is(err, unix.EINVAL) { // EINVAL: unmounted meanwhile
		return fmt.Errorf("unmount tracefs from %s: %w", tracefsDir, err)
	}
	return nil
}

// lockFile opens and locks path. A lock on a file that was removed while we
// waited guards nothing: then it tries again with the new file.
func lockFile(path string, how int) (*os.File, error) {
	for {
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
		var held, named unix.Stat_t
		if unix.Fstat(int(f.Fd()), &held) == nil && unix.Stat(path, &named) == nil &&
			held.Ino == named.Ino && held.Dev == named.Dev {
			return f, nil
		}
		f.Close()
	}
}

// tracefsMountID is the mount ID of the topmost tracefs mounted on
// tracefsDir, or an error when there is none.
func tracefsMountID(mountinfo string) (int, error) {
	f, err := os.Open(mountinfo)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	id := -1
	for sc.Scan() {
		line := sc.Text()
		_, mnt, fstype, ok := parseMountinfoLine(line)
		if !ok || mnt != tracefsDir || fstype != "tracefs" {
			continue
		}
		// Later lines are mounted on top of earlier ones.
		if n, err := strconv.Atoi(strings.Fields(line)[0]); err == nil {
			id = n
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	if id < 0 {
		return 0, errors.New("no tracefs on " + tracefsDir)
	}
	return id, nil
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
