package snapshot

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A symlink in the target's root resolves inside that root: neither an
// absolute link nor a chain of ".." reaches the host file beside it.
func TestReadFileInRootStaysInRoot(t *testing.T) {
	dir := t.TempDir()
	host := filepath.Join(dir, "host-passwd")
	root := filepath.Join(dir, "root")
	fakeTree(t, dir, map[string]string{
		"host-passwd":             "mallory:x:0:0::/:/bin/sh\n",
		"root/etc/real":           "alice:x:0:0::/:/bin/sh\n",
		"root/etc/passwd":         "->/etc/real",
		"root/etc/dotdot":         "->../../../../../../../../.." + host,
		"root/etc/abs":            "->" + host,
		"root/dev/char/195:255":   "->../../../../../../../.." + host,
		"root/dev/nvidia-caps/x/": "",
	})
	g := &fsGuard{timeout: 10 * time.Second}
	b, err := g.readFileInRoot(root, "/etc/passwd", maxFileSize)
	if err != nil || !strings.HasPrefix(string(b), "alice") {
		t.Fatalf("absolute link inside the root: %q %v", b, err)
	}
	for _, name := range []string{"/etc/dotdot", "/etc/abs", "/../../../../" + host} {
		if b, err := g.readFileInRoot(root, name, maxFileSize); err == nil || strings.Contains(string(b), "mallory") {
			t.Errorf("%s read the host file: %q %v", name, b, err)
		}
	}
	// lstat does not follow the last component, and a directory's path
	// that escapes is resolved inside the root too.
	st, dest, err := g.lstatInRoot(root, "/dev/char/195:255")
	if err != nil || st.Mode&unix.S_IFMT != unix.S_IFLNK || !strings.HasSuffix(dest, host) {
		t.Errorf("lstat of the link = %o %q %v", st.Mode, dest, err)
	}
	if _, _, err := g.lstatInRoot(root, "/etc/abs/x"); err == nil {
		t.Error("a path through a link to a host file resolved")
	}
}

func TestReadFileRefusesAndLimits(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, []byte(strings.Repeat("x", 100)), 0o644); err != nil {
		t.Fatal(err)
	}
	g := &fsGuard{timeout: 10 * time.Second}
	for name, kind := range map[string]string{fifo: "FIFO", "/dev/zero": "character device", dir: "directory"} {
		_, err := g.readFile(name, maxFileSize)
		var nr notRegularError
		if !errors.As(err, &nr) || nr.kind != kind || err.Error() != "refused: a "+kind+", not a regular file" {
			t.Errorf("%s: %v, want refused as a %s", name, err, kind)
		}
	}
	b, err := g.readFile(big, 10)
	if !errors.Is(err, errTooLarge) || string(b) != "xxxxxxxxxx" {
		t.Errorf("over the limit: %q %v", b, err)
	}
	if b, err := g.readFile(big, 100); err != nil || len(b) != 100 {
		t.Errorf("at the limit: %d bytes, %v", len(b), err)
	}
	if g.hung.Load() {
		t.Error("nothing hung, yet the guard says so")
	}
}

// An operation that blocks (here a FIFO opened for reading without
// O_NONBLOCK, as a hung FUSE request would) returns at the deadline, and
// the guard then skips further reads instead of waiting again.
func TestGuardDeadline(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	g := &fsGuard{timeout: 100 * time.Millisecond}
	unblocked := make(chan struct{})
	t.Cleanup(func() {
		// A writer releases the blocked open so the goroutine ends.
		if f, err := os.OpenFile(fifo, os.O_WRONLY, 0); err == nil {
			f.Close()
		}
		select {
		case <-unblocked:
		case <-time.After(10 * time.Second):
			t.Error("blocked open never returned")
		}
	})
	start := time.Now()
	_, err := guarded(g, func() (int, error) {
		defer close(unblocked)
		f, err := os.Open(fifo)
		if err == nil {
			f.Close()
		}
		return 0, err
	})
	var te timeoutError
	if !errors.As(err, &te) || !g.hung.Load() {
		t.Fatalf("blocked open: %v", err)
	}
	if waited := time.Since(start); waited > 10*time.Second {
		t.Errorf("waited %v for a 100ms deadline", waited)
	}
	if _, err := g.readFile("/proc/self/status", maxFileSize); !errors.Is(err, errHung) {
		t.Errorf("after a hang: %v, want errHung", err)
	}
}
