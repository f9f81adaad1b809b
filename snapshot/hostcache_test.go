package snapshot

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

// A HostCache gives the snapshots that share it the host's facts an
// uncached snapshot reads, reading the kernel log from one descriptor
// (each record once: a record logged since is added, the log's file gone
// is no matter) and the driver's files at most once per its MaxAge.
func TestHostCacheSharesHostFacts(t *testing.T) {
	dir := t.TempDir()
	kmsg := filepath.Join(dir, "kmsg")
	version := func(v string) string {
		return "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  " + v + "  Release Build  (dvs-builder@U22)  Thu Jan 1 00:00:00 UTC 2026\n"
	}
	fakeTree(t, dir, map[string]string{
		"proc/devices":                      procDevices580,
		"proc/driver/nvidia/version":        version("580.159.04"),
		"proc/driver/nvidia/gpus/0000:06/":  "",
		"proc/driver/nvidia/gpus/0000:06/x": "",
		"sys/module/nvidia/version":         "580.159.04\n",
		"kmsg": "6,100,1000000,-;usb 1-1: new device\n" +
			"3,99,3000000,-;NVRM: RmInitAdapter failed! (0x62:0x65:1792)\n" +
			"3,102,50000000,-;NVRM: Xid (PCI:0000:00:06): 79, GPU has fallen off the bus.\n",
	})
	now := time.Unix(5000, 0)
	h := NewHostCache(time.Minute)
	h.kmsgPath, h.now = kmsg, func() time.Time { return now }
	t.Cleanup(func() { _ = h.Close() })
	collect := func(host *HostCache) *Snapshot {
		c := newCollector(Options{KmsgSince: time.Unix(1000+40, 0), Host: host})
		c.proc, c.sys, c.kmsgPath, c.hostRoot = filepath.Join(dir, "proc"), filepath.Join(dir, "sys"), kmsg, dir
		c.selfMountinfo = func() (string, error) { return "", nil }
		c.bootTime = func() time.Time { return time.Unix(1000, 0) }
		return c.run()
	}
	texts := func(s *Snapshot) []string {
		var out []string
		for _, l := range s.KernelLog {
			out = append(out, l.Text)
		}
		return out
	}

	plain, cached := collect(nil), collect(h)
	for _, s := range []*Snapshot{plain, cached} {
		s.TakenAt = time.Time{}
	}
	if !reflect.DeepEqual(plain, cached) {
		t.Errorf("through the cache:\n%+v\nwithout:\n%+v", cached, plain)
	}
	if len(cached.KernelLog) != 2 || cached.Host.DriverVersion != "580.159.04" || cached.DriverState == nil {
		t.Fatalf("kernel log %q, driver %q, state %+v: want 2 NVRM lines, 580.159.04, a state", texts(cached), cached.Host.DriverVersion, cached.DriverState)
	}

	// A record logged since, a driver upgraded, the log's file removed.
	f, err := os.OpenFile(kmsg, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("3,103,60000000,-;NVRM: Xid (PCI:0000:00:06): 48, DBE.\n"); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(kmsg); err != nil {
		t.Fatal(err)
	}
	fakeTree(t, dir, map[string]string{"proc/driver/nvidia/version": version("590.1.2")})
	s := collect(h)
	if got := texts(s); len(got) != 3 || got[2] != "NVRM: Xid (PCI:0000:00:06): 48, DBE." || !reflect.DeepEqual(s.Unavailable, cached.Unavailable) {
		t.Errorf("kernel log %q (unavailable %q): want the two lines and the new one, from the open descriptor", got, s.Unavailable)
	}
	if v := s.Host.DriverVersion; v != "580.159.04" {
		t.Errorf("driver %s within MaxAge: want the one read before, 580.159.04", v)
	}
	now = now.Add(time.Minute)
	if v := collect(h).Host.DriverVersion; v != "590.1.2" {
		t.Errorf("driver %s past MaxAge: want it read again, 590.1.2", v)
	}
}
