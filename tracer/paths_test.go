package tracer

import "testing"

func TestPathRules(t *testing.T) {
	for _, c := range []struct {
		path       string
		open, stat bool
	}{
		{"/dev/nvidia-uvm", true, true},
		{"/dev/nvidiactl", true, true},
		{"/dev/char/195:255", true, true},
		{"/proc/driver/nvidia/params", true, false},
		{"/proc/devices", true, false},
		{"/sys/module/nvidia_uvm/parameters/uvm_disable_hmm", true, false},
		{"/usr/local/nvidia/lib64/libcuda.so.1", true, false},
		{"/usr/local/cuda/lib64/stubs/libcuda.so", true, false},
		{"/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1", true, false},
		{"/usr/bin/nvidia-modprobe", false, true},
		{"/usr/lib/libcudart.so.12", false, false},
		{"/dev/null", false, false},
		{"/proc/version", false, false},
		// The library rule looks at the file's name only (nvfile.IsLibrary),
		// as the BPF filter does: relative names count, a directory named
		// like the library does not.
		{"libcuda.so.1", true, false},
		{"./libnvidia-ml.so.1", true, false},
		{"/opt/libcuda.so.1/README", false, false},
		{"/opt/mylibcuda.so", false, false},
	} {
		if got := IsInterestingOpen(c.path); got != c.open {
			t.Errorf("IsInterestingOpen(%q) = %v, want %v", c.path, got, c.open)
		}
		if got := IsInterestingStat(c.path); got != c.stat {
			t.Errorf("IsInterestingStat(%q) = %v, want %v", c.path, got, c.stat)
		}
	}
}
