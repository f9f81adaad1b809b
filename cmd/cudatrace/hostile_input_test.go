package main

import (
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cudatrace/cudatrace/internal/privtest"
)

// explain and report refuse what is not a regular file, unread, in one
// line with exit 4: /dev/zero was read until killed, and a FIFO with no
// writer blocked.
func TestOfflineRefusesNonRegular(t *testing.T) {
	privtest.Deadline(t)
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ path, kind string }{{"/dev/zero", "character device"}, {fifo, "FIFO"}} {
		for _, cmd := range []string{"explain", "report"} {
			r := runCLI(t, cmd, tc.path)
			if r.code != exitBadInput {
				t.Errorf("%s %s: exit %d, want %d; stderr %q", cmd, tc.path, r.code, exitBadInput, r.stderr)
			}
			oneLineError(t, r, tc.path+": refused: a "+tc.kind+", not a regular file")
		}
	}
	for _, cmd := range []string{"explain", "report"} {
		if h := runCLI(t, "help", cmd).stdout; !strings.Contains(strings.Join(strings.Fields(h), " "), "4 the input is not a report or strace log, or holds no NVIDIA call (report prints it first); a device or FIFO is refused unread") {
			t.Errorf("help %s does not document the refusal's exit status:\n%s", cmd, h)
		}
	}
}
