package snapshot

import (
	"os"
	"testing"

	"github.com/cudatrace/cudatrace/internal/privtest"
)

// TestKernelLogSourcesAgree reads the host's real kernel log both ways,
// writing nothing to it: /dev/kmsg and syslog(2) (used where /dev/kmsg
// cannot be opened, as in a container) give the newest records alike, at
// the same time since boot. The window and filtering are tested on a fake
// log (TestCollectKernelLogFromDevice, TestCollectKernelLogSyslogFallback).
func TestKernelLogSourcesAgree(t *testing.T) {
	privtest.RequireRoot(t)
	privtest.Deadline(t)
	var dev []kmsgRecord
	if err, readErr := readKmsgFile("/dev/kmsg", func(r kmsgRecord) { dev = append(dev, r) }); err != nil || readErr != nil {
		if os.IsNotExist(err) {
			privtest.Skip(t, "no /dev/kmsg here")
		}
		t.Fatalf("/dev/kmsg: open %v, read %v", err, readErr)
	}
	buf, err := readSyslogBuffer()
	if err != nil {
		t.Fatalf("syslog(2): %v", err)
	}
	sys := parseSyslogBuffer(buf)
	if len(dev) == 0 || len(sys) == 0 {
		t.Fatalf("%d records from /dev/kmsg, %d from syslog(2): a booted kernel has logged something", len(dev), len(sys))
	}
	// Records may be logged between the two reads: match syslog(2)'s
	// newest record that /dev/kmsg has, by time and text.
	byUsec := map[uint64]kmsgRecord{}
	for _, r := range dev {
		byUsec[r.Usec] = r
	}
	matched := 0
	for i := len(sys) - 1; i >= 0 && matched < 3; i-- {
		s := sys[i]
		d, ok := byUsec[s.Usec]
		if !ok || s.NoTime {
			continue
		}
		matched++
		if d.Text != s.Text || d.Level != s.Level || d.Seq == 0 || s.Seq != 0 {
			t.Errorf("syslog(2) record %+v, /dev/kmsg's at the same time %+v", s, d)
		}
	}
	if matched == 0 {
		t.Fatalf("none of syslog(2)'s %d records is /dev/kmsg's (newest: %+v and %+v)", len(sys), sys[len(sys)-1], dev[len(dev)-1])
	}
}
