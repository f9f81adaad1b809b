package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Run by hand as root, fakecuda would create /dev/nvidiactl on the host:
// it refuses unless /dev is the scenario's tmpfs, or --dev/--host-dev say
// otherwise.
func TestCheckDev(t *testing.T) {
	dir := t.TempDir()
	info := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	host := info("host", "22 1 0:5 / /dev rw,nosuid - devtmpfs udev rw,size=4k\n")
	scen := info("scenario", "22 1 0:5 / /dev rw,nosuid - devtmpfs udev rw\n"+
		"900 22 0:77 / /dev rw,relatime shared:1 - tmpfs cudatrace-scenario rw\n")
	o := func(dev string, hostDev bool) *options { return &options{dev: dev, hostDev: hostDev} }
	for _, tc := range []struct {
		name      string
		opts      *options
		euid      int
		mountinfo string
		refuse    bool
	}{
		{"root, host /dev", o("/dev", false), 0, host, true},
		{"root, host /dev/", o("/dev/", false), 0, host, true},
		{"root, scenario /dev", o("/dev", false), 0, scen, false},
		{"root, --host-dev", o("/dev", true), 0, host, false},
		{"root, --dev elsewhere", o(dir, false), 0, host, false},
		{"not root", o("/dev", false), 1000, host, false},
		{"root, no mountinfo", o("/dev", false), 0, filepath.Join(dir, "missing"), true},
	} {
		err := checkDev(tc.opts, tc.euid, tc.mountinfo)
		if (err != nil) != tc.refuse {
			t.Errorf("%s: %v, want refused %v", tc.name, err, tc.refuse)
		}
		if err != nil && !strings.Contains(err.Error(), "--dev") {
			t.Errorf("%s: %q does not say how to proceed", tc.name, err)
		}
	}
}
