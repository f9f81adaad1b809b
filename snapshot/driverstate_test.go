package snapshot

import (
	"io"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestScanKernelConfig(t *testing.T) {
	for _, tc := range []struct {
		name, config string
		want         map[string]string
	}{
		{"both set", "CONFIG_A=y\nCONFIG_HMM_MIRROR=y\nCONFIG_DEVICE_PRIVATE=m\n",
			map[string]string{"CONFIG_HMM_MIRROR": "y", "CONFIG_DEVICE_PRIVATE": "m"}},
		{"one not set, one absent", "# CONFIG_DEVICE_PRIVATE is not set\nCONFIG_B=y\n",
			map[string]string{"CONFIG_HMM_MIRROR": "n", "CONFIG_DEVICE_PRIVATE": "n"}},
		// A prefix of another key's name is not that key.
		{"longer names", "CONFIG_HMM_MIRROR_X=y\nCONFIG_DEVICE_PRIVATE=y\n",
			map[string]string{"CONFIG_HMM_MIRROR": "n", "CONFIG_DEVICE_PRIVATE": "y"}},
		{"empty", "", map[string]string{"CONFIG_HMM_MIRROR": "n", "CONFIG_DEVICE_PRIVATE": "n"}},
	} {
		if got := scanKernelConfig(strings.NewReader(tc.config)); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	// Both seen: the rest is not read (a reader that fails past them).
	r := &failAfter{data: "CONFIG_HMM_MIRROR=y\n# CONFIG_DEVICE_PRIVATE is not set\n", t: t}
	if got := scanKernelConfig(r); got["CONFIG_HMM_MIRROR"] != "y" || got["CONFIG_DEVICE_PRIVATE"] != "n" {
		t.Errorf("early stop: %v", got)
	}
}

// failAfter serves data, then fails the test if read again.
type failAfter struct {
	data string
	done bool
	t    *testing.T
}

func (f *failAfter) Read(p []byte) (int, error) {
	if f.done {
		f.t.Error("read past the keys")
		return 0, io.EOF
	}
	f.done = true
	return copy(p, f.data), nil
}

func TestCollectDaemons(t *testing.T) {
	proc := t.TempDir()
	fakeTree(t, proc, map[string]string{
		"1/comm":    "systemd\n",
		"200/comm":  "nvidia-persiste\n",
		"300/comm":  "nv-fabricmanager\n",
		"301/comm":  "nv-fabricmanager\n",
		"self/comm": "nvidia-persiste\n", // not a PID
		"400/stat":  "no comm",
	})
	c := newCollector(Options{})
	c.proc = proc
	sv := &DriverState{}
	c.collectDaemons(sv)
	if want := []string{"nv-fabricmanager", "nvidia-persistenced"}; !reflect.DeepEqual(sv.Daemons, want) {
		t.Errorf("daemons %q, want %q", sv.Daemons, want)
	}
	c.proc = filepath.Join(proc, "none")
	c.snap = &Snapshot{}
	c.collectDaemons(&DriverState{})
	if len(c.snap.Unavailable) != 1 || !strings.Contains(c.snap.Unavailable[0], "process list") {
		t.Errorf("unreadable /proc: unavailable %q", c.snap.Unavailable)
	}
}
