package ebpf

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/features"

	"github.com/cudatrace/cudatrace/internal/privtest"
	"github.com/cudatrace/cudatrace/tracer"
)

// The first required feature the kernel lacks is named in one line that
// lets auto fall back (diagnose's TestAutoFallsBackWhenEBPFCannotLoad); the
// features after it are not probed. No kernel below the minimum (5.10) is
// booted here: the probe is faked.
func TestMissingFeatureNamed(t *testing.T) {
	privtest.RequireRoot(t) // probeKernel lifts RLIMIT_MEMLOCK where charged
	saved := requiredFeatures
	t.Cleanup(func() { requiredFeatures = saved })
	probedAfter := false
	requiredFeatures = append(requiredFeatures[:0:0], saved[0],
		feature{"a feature", "9.9", func() error { return ebpf.ErrNotSupported }},
		feature{"another", "9.10", func() error { probedAfter = true; return nil }},
	)
	v := probeKernel()
	if v.missing == nil {
		t.Fatal("a kernel lacking a required feature passed the probe")
	}
	msg := v.missing.Error()
	if !errors.Is(v.missing, tracer.ErrUnavailable) || strings.Contains(msg, "\n") ||
		!strings.Contains(msg, "need a feature (Linux 9.9 or newer") || !strings.Contains(msg, MinimumKernel) {
		t.Errorf("reason %q (unavailable: %v), want one line naming the feature, its kernel and the minimum", msg, errors.Is(v.missing, tracer.ErrUnavailable))
	}
	if probedAfter {
		t.Error("features after the first missing one were probed")
	}
}

// This kernel (the suite's) has every required feature, and the variants
// name one choice per feature.
func TestKernelVariants(t *testing.T) {
	privtest.RequireRoot(t)
	v := kernelSupport()
	if v.missing != nil {
		t.Fatalf("this kernel lacks a feature: %v", v.missing)
	}
	want := 4
	if v.oldKernel != "" {
		want += len(oldKernelVariants)
	}
	if l := v.list(); len(l) != want || !strings.HasPrefix(l[0], "memlock=") || !strings.HasPrefix(l[1], "scans=") {
		t.Errorf("variants %q", l)
	}
}

// The cheap task storage probe says what cilium/ebpf's own says.
func TestTaskStorageProbe(t *testing.T) {
	privtest.RequireRoot(t)
	want := features.HaveMapType(ebpf.TaskStorage)
	got := probeTaskStorage()
	if errors.Is(got, ebpf.ErrNotSupported) != errors.Is(want, ebpf.ErrNotSupported) || (got == nil) != (want == nil) {
		t.Fatalf("probeTaskStorage: %v, features.HaveMapType: %v", got, want)
	}
}

// A kernel that lacks one of what the main object needs, but not what both
// do, takes the object for older kernels, and the variants say which
// feature chose it; the features after it are not probed.
func TestOldKernelChosenByProbe(t *testing.T) {
	privtest.RequireRoot(t) // probeKernel lifts RLIMIT_MEMLOCK where charged
	saved := oldKernelFeatures
	t.Cleanup(func() { oldKernelFeatures = saved })
	probedAfter := false
	oldKernelFeatures = []feature{
		{"a feature", "9.9", func() error { return ebpf.ErrNotSupported }},
		{"another", "9.10", func() error { probedAfter = true; return nil }},
	}
	v := probeKernel()
	if v.missing != nil {
		t.Fatalf("refused (%v), want the object for older kernels", v.missing)
	}
	if v.oldKernel != "a feature (Linux 9.9)" || v.loop || v.uprobeMulti || probedAfter {
		t.Errorf("oldKernel %q, bpf_loop %v, uprobe_multi %v, probed after %v", v.oldKernel, v.loop, v.uprobeMulti, probedAfter)
	}
	if l := v.list(); !slices.Equal(l[len(l)-len(oldKernelVariants):], oldKernelVariants) || !strings.Contains(v.String(), "a feature") {
		t.Errorf("variants %q (%s)", l, v.String())
	}
}
