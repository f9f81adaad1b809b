package snapshot

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cudatrace/cudatrace/internal/privtest"
)

// TestCollectKernelLogSyslog: with /dev/kmsg unopenable (as in a container,
// whose /dev has none), a line just logged is read from syslog(2), at the
// time /dev/kmsg gives it.
func TestCollectKernelLogSyslog(t *testing.T) {
	privtest.RequireRoot(t)
	start := time.Now()
	marker := fmt.Sprintf("NVRM: cudatrace syslog test %d-%d", os.Getpid(), start.UnixNano())
	if err := os.WriteFile("/dev/kmsg", []byte(marker+"\n"), 0); err != nil {
		privtest.Skip(t, "cannot write /dev/kmsg: "+err.Error())
	}
	find := func(kmsgPath string) KernelLine {
		c := newCollector(Options{PID: os.Getpid(), KmsgSince: start.Add(-time.Second)})
		c.kmsgPath = kmsgPath
		s := c.run()
		for _, u := range s.Unavailable {
			if strings.HasPrefix(u, "kernel log") {
				t.Fatalf("unavailable: %s", u)
			}
		}
		for _, l := range s.KernelLog {
			if strings.Contains(l.Text, marker) {
				return l
			}
		}
		t.Fatalf("%q not in the kernel log read from %s", marker, kmsgPath)
		return KernelLine{}
	}
	viaKmsg := find("/dev/kmsg")
	viaSyslog := find(filepath.Join(t.TempDir(), "kmsg"))
	if viaSyslog.Seq != 0 || viaKmsg.Seq == 0 || viaSyslog.Text != viaKmsg.Text || viaSyslog.Older {
		t.Errorf("syslog(2) line %+v, /dev/kmsg line %+v", viaSyslog, viaKmsg)
	}
	// The boot time is estimated anew by each collector: a few ms apart.
	if viaSyslog.T == nil || viaKmsg.T == nil {
		t.Fatalf("no time: syslog(2) %+v, /dev/kmsg %+v", viaSyslog, viaKmsg)
	}
	if d := *viaSyslog.T - *viaKmsg.T; d > 50*time.Millisecond || d < -50*time.Millisecond {
		t.Errorf("times differ: syslog(2) %v, /dev/kmsg %v", *viaSyslog.T, *viaKmsg.T)
	}
}
