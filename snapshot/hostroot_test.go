package snapshot

import (
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/cudatrace/cudatrace/internal/privtest"
)

// The host's files are read inside the host root: a merged-/usr host's
// absolute /lib link leads to its own /usr/lib, not to cudatrace's, and
// the paths reported are the host's.
func TestHostFilesInHostRoot(t *testing.T) {
	host := t.TempDir()
	fakeTree(t, host, map[string]string{
		"lib": "->/usr/lib",
		"usr/lib/firmware/nvidia/580.1/gsp_ga10x.bin": "x",
		"usr/lib/firmware/nvidia/580.1/README":        "x",
		"boot":                                        "->/usr/boot",
		"usr/boot/config-6.8.0-test":                  "CONFIG_HMM_MIRROR=y\nCONFIG_DEVICE_PRIVATE=y\n",
		"var/lib/lxc/101/config":                      "lxc.cgroup2.devices.allow = c 195:* rwm\n",
	})
	c := newCollector(Options{})
	c.proc, c.sys, c.hostRoot = filepath.Join(host, "no-proc"), filepath.Join(host, "no-sys"), host
	c.snap = &Snapshot{Host: Host{Kernel: "6.8.0-test", DriverVersion: "580.1"}, Driver: Driver{Loaded: true}}
	c.collectDriverState()
	ds := c.snap.DriverState
	if want := []string{"/lib/firmware/nvidia/580.1/gsp_ga10x.bin"}; !reflect.DeepEqual(ds.Firmware.Files, want) {
		t.Errorf("firmware files %q, want %q", ds.Firmware.Files, want)
	}
	if ds.KernelConfig["CONFIG_HMM_MIRROR"] != "y" {
		t.Errorf("kernel config %v: /boot/config-6.8.0-test not read in the host root", ds.KernelConfig)
	}
	if !c.hostExists("/var/lib/lxc/101/config") || !c.hostExists("/var/lib/lxc/") || c.hostExists("/var/lib/lxc/101/config/") {
		t.Error("hostExists does not see the host root's files as they are")
	}
}

func TestHostRootDir(t *testing.T) {
	saved := [2]string{initMountNS, initRoot}
	t.Cleanup(func() { initMountNS, initRoot = saved[0], saved[1] })
	// PID 1's mount namespace is ours: "/".
	initMountNS, initRoot = "/proc/self/ns/mnt", "/proc/self/root"
	if got := hostRootDir(); got != "/" {
		t.Errorf("in init's mount namespace: %q, want /", got)
	}
	// Unreadable: "/".
	initMountNS = filepath.Join(t.TempDir(), "none")
	if got := hostRootDir(); got != "/" {
		t.Errorf("init's namespace unreadable: %q, want /", got)
	}
}

// In a mount namespace other than PID 1's (a pod's), PID 1's root is the
// host root; here a process in a private mount namespace stands for PID 1,
// and this test process for cudatrace in its pod.
func TestHostRootDirOtherMountNS(t *testing.T) {
	privtest.RequireRoot(t)
	saved := [2]string{initMountNS, initRoot}
	t.Cleanup(func() { initMountNS, initRoot = saved[0], saved[1] })
	cmd := exec.CommandContext(privtest.Deadline(t), "unshare", "-m", "--propagation", "private", "sleep", "60")
	if err := cmd.Start(); err != nil {
		privtest.Skip(t, "cannot start unshare: "+err.Error())
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	other := "/proc/" + strconv.Itoa(cmd.Process.Pid)
	for i := 0; ; i++ { // until unshare has exec'd sleep in its namespace
		if otherNamespace(other+"/ns/mnt", "/proc/self/ns/mnt") {
			break
		}
		if i == 1000 {
			t.Fatal("the child never got a mount namespace of its own")
		}
		time.Sleep(time.Millisecond)
	}
	initMountNS, initRoot = other+"/ns/mnt", other+"/root"
	if got := hostRootDir(); got != initRoot {
		t.Errorf("in another mount namespace than init's: %q, want %q", got, initRoot)
	}
}
