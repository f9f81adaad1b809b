package snapshot

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestParseSyslogBuffer(t *testing.T) {
	buf := "<6>[    1.000000] usb 1-1: new device\n" +
		"<3>[    3.000000] NVRM: RmInitAdapter failed! (0x62:0x65:1792)\n" +
		// A multi-line record: the kernel repeats the prefix on each line.
		"<4>[   12.345678] NVRM: API mismatch: the client 'rmprobe' (pid 3228)\n" +
		"<4>[   12.345678] NVRM: has the version 0.0.0\n" +
		// CONFIG_PRINTK_CALLER, and a facility above the level (kern.=0, user.=8).
		"<12>[   50.000001][ T1234] NVRM: Xid (PCI:0000:00:06): 79, GPU has fallen off the bus.\n" +
		"<6>[   60.000000] [Firmware Bug]: TSC doesn't count\n" +
		// printk.time=0.
		"<3>NVRM: no time\n" +
		"garbage\n<x>[ 1.0] bad prio\n"
	want := []kmsgRecord{
		{Level: 6, Usec: 1_000_000, Text: "usb 1-1: new device"},
		{Level: 3, Usec: 3_000_000, Text: "NVRM: RmInitAdapter failed! (0x62:0x65:1792)"},
		{Level: 4, Usec: 12_345_678, Text: "NVRM: API mismatch: the client 'rmprobe' (pid 3228) NVRM: has the version 0.0.0"},
		{Level: 4, Usec: 50_000_001, Text: "NVRM: Xid (PCI:0000:00:06): 79, GPU has fallen off the bus."},
		{Level: 6, Usec: 60_000_000, Text: "[Firmware Bug]: TSC doesn't count"},
		{Level: 3, NoTime: true, Text: "NVRM: no time"},
	}
	if got := parseSyslogBuffer([]byte(buf)); !reflect.DeepEqual(got, want) {
		t.Errorf("parseSyslogBuffer =\n%+v\nwant\n%+v", got, want)
	}
	// The same record read from /dev/kmsg parses to the same text and time.
	kmsg, ok := parseKmsgRecord(`4,77,12345678,-;NVRM: API mismatch: the client 'rmprobe' (pid 3228)\x0aNVRM: has the version 0.0.0`)
	if !ok || kmsg.Text != want[2].Text || kmsg.Usec != want[2].Usec || kmsg.Level != want[2].Level {
		t.Errorf("/dev/kmsg's record %+v differs from syslog's %+v", kmsg, want[2])
	}
}

// Where /dev/kmsg cannot be opened, syslog(2)'s buffer gives the same
// lines, at the same times on the trace's timeline (without /dev/kmsg's
// sequence numbers).
func TestCollectKernelLogSyslogFallback(t *testing.T) {
	dir := t.TempDir()
	kmsg := "6,100,1000000,-;usb 1-1: new device\n" +
		"3,99,3000000,-;NVRM: RmInitAdapter failed! (0x62:0x65:1792)\n" +
		"4,101,42000000,-;NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  580.159.04\n SUBSYSTEM=module\n" +
		"3,102,50000000,-;NVRM: Xid (PCI:0000:00:06): 79, GPU has fallen off the bus.\n"
	syslog := "<6>[    1.000000] usb 1-1: new device\n" +
		"<3>[    3.000000] NVRM: RmInitAdapter failed! (0x62:0x65:1792)\n" +
		"<4>[   42.000000] NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  580.159.04\n" +
		"<3>[   50.000000] NVRM: Xid (PCI:0000:00:06): 79, GPU has fallen off the bus.\n"
	fakeTree(t, dir, map[string]string{"kmsg": kmsg})
	collect := func(kmsgPath string, syslog func() ([]byte, error)) *Snapshot {
		c := newCollector(Options{KmsgSince: time.Unix(1000+40, 0)})
		c.snap = &Snapshot{}
		c.kmsgPath, c.readSyslog = kmsgPath, syslog
		c.bootTime = func() time.Time { return time.Unix(1000, 0) }
		c.collectKernelLog()
		return c.snap
	}
	noSyslog := func() ([]byte, error) { t.Error("syslog(2) read while /dev/kmsg opens"); return nil, errors.New("no") }
	fromKmsg := collect(filepath.Join(dir, "kmsg"), noSyslog)
	fromSyslog := collect(filepath.Join(dir, "no-kmsg"), func() ([]byte, error) { return []byte(syslog), nil })
	if len(fromKmsg.KernelLog) != 3 || len(fromSyslog.Unavailable) != 0 {
		t.Fatalf("kmsg lines %+v; syslog unavailable %q", fromKmsg.KernelLog, fromSyslog.Unavailable)
	}
	for i := range fromKmsg.KernelLog {
		fromKmsg.KernelLog[i].Seq = 0
	}
	if !reflect.DeepEqual(fromKmsg.KernelLog, fromSyslog.KernelLog) {
		t.Errorf("syslog(2) lines\n%+v\ndiffer from /dev/kmsg's\n%+v", fromSyslog.KernelLog, fromKmsg.KernelLog)
	}
	if l := fromSyslog.KernelLog[0]; !l.Older || l.T == nil || *l.T != -37*time.Second {
		t.Errorf("older error = %+v", l)
	}

	// Both unreadable: one line names both, with what is needed.
	s := collect(filepath.Join(dir, "no-kmsg"), func() ([]byte, error) { return nil, os.ErrPermission })
	want := "kernel log: " + filepath.Join(dir, "no-kmsg") + ": no such file or directory; syslog(2): permission denied"
	if len(s.Unavailable) != 1 || s.Unavailable[0] != want || len(s.KernelLog) != 0 {
		t.Errorf("unavailable %q, want %q", s.Unavailable, want)
	}

	// Without printk times, an error is kept as history only, and that is said.
	s = collect(filepath.Join(dir, "no-kmsg"), func() ([]byte, error) {
		return []byte("<4>NVRM: loading NVIDIA module\n<3>NVRM: RmInitAdapter failed!\n"), nil
	})
	if len(s.KernelLog) != 1 || !s.KernelLog[0].Older || s.KernelLog[0].T != nil ||
		len(s.Unavailable) != 1 || !strings.Contains(s.Unavailable[0], "no time") {
		t.Errorf("untimed: lines %+v unavailable %q", s.KernelLog, s.Unavailable)
	}
}

// The kernel log is read as /dev/kmsg gives it, without blocking: records
// until EAGAIN. A FIFO with a writer open stands in for the device (it
// answers EAGAIN once drained), so no test writes to the host's log (a
// later doctor there would report the test's lines as the driver's). The
// window keeps the driver's lines since its start, and only errors before.
func TestCollectKernelLogFromDevice(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "kmsg")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	// O_RDWR: the open does not wait for a reader, and keeps a writer, so
	// a drained FIFO answers EAGAIN, not EOF.
	w, err := os.OpenFile(fifo, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	boot := time.Unix(1000, 0)
	collect := func(since time.Time, records string) *Snapshot {
		if _, err := w.WriteString(records); err != nil {
			t.Fatal(err)
		}
		c := newCollector(Options{KmsgSince: since})
		c.snap = &Snapshot{}
		c.kmsgPath = fifo
		c.readSyslog = func() ([]byte, error) { t.Error("syslog(2) read while the device opens"); return nil, errors.New("no") }
		c.bootTime = func() time.Time { return boot }
		c.collectKernelLog()
		return c.snap
	}
	records := "6,200,5000000,-;NVRM: loading NVIDIA UNIX x86_64 Kernel Module  580.95.05\n" +
		"3,201,6000000,-;NVRM: GPU 0000:00:06.0: RmInitAdapter failed! (0x62:0x65:1792)\n" +
		"6,202,60000000,-;usb 1-1: new device\n" +
		"4,203,61000000,-;NVRM: cudatrace fake-log test line\n"
	s := collect(boot.Add(60*time.Second), records)
	var got []string
	for _, l := range s.KernelLog {
		got = append(got, fmt.Sprintf("%d older=%v", l.Seq, l.Older))
	}
	if want := []string{"201 older=true", "203 older=false"}; !reflect.DeepEqual(got, want) || len(s.Unavailable) != 0 {
		t.Fatalf("kernel lines %q, want %q; unavailable %q", got, want, s.Unavailable)
	}
	if l := s.KernelLog[1]; l.T == nil || *l.T != time.Second || l.Text != "NVRM: cudatrace fake-log test line" {
		t.Errorf("line in the window = %+v", l)
	}
	// A window that starts an hour later keeps the error, as history, only.
	s = collect(boot.Add(time.Hour), records)
	if len(s.KernelLog) != 1 || s.KernelLog[0].Seq != 201 || !s.KernelLog[0].Older {
		t.Errorf("an hour later: %+v", s.KernelLog)
	}
}
