package snapshot

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/cudatrace/cudatrace/internal/privtest"
)

// startHostileTarget starts a shell in its own user and mount namespace
// that puts overPasswd (a path on the host) over its /etc/passwd and makes
// its /dev a tmpfs of traps: a FIFO where nvidiactl should be, a FIFO where
// a directory is expected, a /dev/char link to it, and more entries than
// the listing limit. It returns the shell's PID once all is in place.
func startHostileTarget(t *testing.T, overPasswd string) int {
	t.Helper()
	script := strings.Join([]string{
		"set -e",
		"mount --bind " + overPasswd + " /etc/passwd",
		"mount -t tmpfs none /dev",
		"mkfifo /dev/nvidiactl /dev/nvidia-caps",
		"mkdir /dev/char",
		"ln -s ../nvidiactl /dev/char/195:255",
		"cd /dev && seq 20000 | sed 's/^/junk/' | xargs touch",
		"echo ready",
		"exec sleep 60",
	}, "\n")
	cmd := startReady(t, []string{"--user", "--map-root-user", "--mount", "--propagation", "private"}, script)
	return cmd.Process.Pid
}

// collectWithin collects pid's snapshot, failing the test if that takes
// longer than a generous deadline (it takes under a second, or one
// fsTimeout when a read hangs). The trace is taken to have seen the open
// of /dev/nvidiactl, so that a truncated listing need not hold it.
func collectWithin(t *testing.T, pid int) *Snapshot {
	t.Helper()
	start := time.Now()
	done := make(chan *Snapshot, 1)
	go func() {
		done <- Collect(Options{PID: pid, ExtraPaths: []string{"/dev/nvidiactl"},
			QueryCgroupPrograms: func(string, string) ([]DeviceProgram, error) { return nil, nil }})
	}()
	select {
	case s := <-done:
		t.Logf("Collect took %v", time.Since(start).Round(time.Millisecond))
		return s
	case <-time.After(60 * time.Second):
		t.Fatal("Collect hangs on a hostile target")
		return nil
	}
}

// TestCollectHostileTarget: a target that bind-mounts a FIFO or /dev/zero
// over its /etc/passwd must neither hang cudatrace (a FIFO's open blocks
// until a writer comes) nor make it read without end, and the snapshot
// says what it refused.
func TestCollectHostileTarget(t *testing.T) {
	privtest.RequireRoot(t)
	for _, tc := range []struct{ name, kind string }{
		{"fifo", "FIFO"},
		{"zero", "character device"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			over := "/dev/zero"
			if tc.name == "fifo" {
				over = filepath.Join(t.TempDir(), "fifo")
				if out, err := exec.Command("mkfifo", over).CombinedOutput(); err != nil {
					t.Fatalf("mkfifo: %v %s", err, out)
				}
			}
			pid := startHostileTarget(t, over)

			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			s := collectWithin(t, pid)
			runtime.ReadMemStats(&after)
			// Bounded memory: the listing limit and no read of /dev/zero.
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 64<<20 {
				t.Errorf("Collect allocated %d MB", alloc>>20)
			}

			notes := strings.Join(s.Unavailable, "\n")
			for _, want := range []string{
				"target /etc/passwd (user name): refused: a " + tc.kind + ", not a regular file",
				"listing /dev (only part read): more than 16384 entries",
			} {
				if !strings.Contains(notes, want) {
					t.Errorf("unavailable lacks %q:\n%s", want, notes)
				}
			}
			if s.Process.User != "" || s.Process.PID != pid {
				t.Errorf("process = %+v", s.Process)
			}
			ctl := s.Node("/dev/nvidiactl")
			if ctl == nil || !ctl.Exists || ctl.Type != "" {
				t.Errorf("/dev/nvidiactl (a FIFO) = %+v", ctl)
			}
			if n := s.Node("/dev/char/195:255"); n == nil || n.Type != "l" || n.LinkDest != "../nvidiactl" {
				t.Errorf("/dev/char/195:255 = %+v", n)
			}
		})
	}
}

// TestCollectHungFilesystem: a target whose /dev is a FUSE mount that never
// answers (its server never even completes FUSE_INIT), as a target can set
// up in its own namespaces, stalls every lookup below it. Collect gives up
// on that read at its deadline, skips the rest of the target's files
// rather than wait again, reads the rest of the system, and says so.
func TestCollectHungFilesystem(t *testing.T) {
	privtest.RequireRoot(t)
	// fd 3 stays open in the shell, and after exec in sleep, so the
	// connection lives, unanswered, until the test kills it; then the
	// abandoned lookup gets ENOTCONN. (Over /dev, not /etc: sleep's loader
	// would hang on /etc too, on the FUSE directory lock the abandoned
	// lookup holds, and could then not be killed.)
	cmd := startReady(t, []string{"--mount", "--propagation", "private"}, strings.Join([]string{
		"set -e",
		"exec 3<>/dev/fuse",
		"mount -i -t fuse -o fd=3,rootmode=40000,user_id=0,group_id=0 cudatrace-test-hung /dev",
		"echo ready",
		"exec sleep 60",
	}, "\n"))
	pid := cmd.Process.Pid

	s := collectWithin(t, pid)
	notes := strings.Join(s.Unavailable, "\n")
	for _, want := range []string{
		"listing /dev: did not finish within",
		"listing /dev/nvidia-caps: skipped: an earlier read of the target's files hung",
		"node /dev/nvidiactl: skipped: an earlier read of the target's files hung",
	} {
		if !strings.Contains(notes, want) {
			t.Errorf("unavailable lacks %q:\n%s", want, notes)
		}
	}
	// The hang costs only the target's files: /proc and the host's are read.
	if len(s.ProcDevices) == 0 || s.Process.User != "root" || strings.Contains(notes, "mountinfo") || strings.Contains(notes, "target environment") {
		t.Errorf("a hang in the target's root cost other facts: %d majors, user %q; unavailable:\n%s", len(s.ProcDevices), s.Process.User, notes)
	}
}
