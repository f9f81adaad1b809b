package ebpftrace

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// tracefsDir is where we mount tracefs when nobody has: the syscall
// tracepoints' ids are only published there.
const tracefsDir = "/sys/kernel/tracing"

// tracefs mounts are shared between concurrent Runs in one process; the last
// one out unmounts what the first one mounted.
var tracefsState tracefsRefs

type tracefsRefs struct {
	sync.Mutex
	refs    int
	mounted bool // we mounted it, so we unmount it
}

// acquireTracefs makes sure tracefs is reachable and returns the function
// that undoes whatever it did.
func acquireTracefs() (release func() error, err error) {
	s := &tracefsState
	s.Lock()
	defer s.Unlock()
	if s.refs == 0 {
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
			s.mounted = true
		}
	}
	s.refs++
	var once sync.Once
	return func() (err error) {
		once.Do(func() { err = s.release() })
		return err
	}, nil
}

func (s *tracefsRefs) release() error {
	s.Lock()
	defer s.Unlock()
	s.refs--
	if s.refs > 0 || !s.mounted {
		return nil
	}
	s.mounted = false
	err := unix.Unmount(tracefsDir, 0)
	if errors.Is(err, unix.EBUSY) {
		// Someone is using it (a shell cd'ed into it): detach it anyway.
		err = unix.Unmount(tracefsDir, unix.MNT_DETACH)
	}
	if err != nil {
		return fmt.Errorf("unmount tracefs from %s: %w", tracefsDir, err)
	}
	return nil
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
	if len(s) != 3 {
		return 0, false
	}
	var v int
	for _, c := range s {
		if c < '0' || c > '7' {
			return 0, false
		}
		v = v*8 + int(c-'0')
	}
	return byte(v), v < 256
}
