package diagnose

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cudatrace/cudatrace/diagnose/record"
	"github.com/cudatrace/cudatrace/internal/privtest"
	"github.com/cudatrace/cudatrace/nvdev"
	"github.com/cudatrace/cudatrace/snapshot"
	"github.com/cudatrace/cudatrace/tracer"
)

// One function fills the NVIDIA settings of every command's Spec (trace,
// attach, watch): the majors from /proc/devices, the driver's in-band
// status table, the folding limits when asked; an unreadable file is an
// error, a missing one no driver.
func TestNvidiaSpec(t *testing.T) {
	privtest.Deadline(t)
	pd := filepath.Join(t.TempDir(), "devices")
	if err := os.WriteFile(pd, []byte("Character devices:\n  1 mem\n195 nvidia-frontend\n508 nvidia-uvm\n511 nvidia-caps\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var spec tracer.Spec
	if err := NVIDIASpec(&spec, pd, []uint{7}, true); err != nil {
		t.Fatal(err)
	}
	if want := []uint32{195, 508, 511, 7}; !slices.Equal(spec.DeviceMajors, want) {
		t.Errorf("majors %v, want %v", spec.DeviceMajors, want)
	}
	want := nvdev.InbandStatusWords(snapshot.HostDriverVersion())
	if len(spec.InbandStatus) == 0 || !slices.Equal(spec.InbandStatus, want) {
		t.Errorf("in-band status table of %d words, want the running driver's %d", len(spec.InbandStatus), len(want))
	}
	if spec.FoldIoctlsAfter != record.IoctlSamplePerSite || spec.FoldCallsAfter != record.SamplePerSite {
		t.Errorf("fold after %d ioctls, %d calls", spec.FoldIoctlsAfter, spec.FoldCallsAfter)
	}

	var unfolded tracer.Spec
	if err := NVIDIASpec(&unfolded, filepath.Join(t.TempDir(), "missing"), nil, false); err != nil {
		t.Fatalf("a missing /proc/devices: %v", err)
	}
	if !slices.Equal(unfolded.DeviceMajors, []uint32{195}) || unfolded.FoldIoctlsAfter != 0 || unfolded.FoldCallsAfter != 0 || len(unfolded.InbandStatus) == 0 {
		t.Errorf("no driver, no folding: %+v", unfolded)
	}
	if err := NVIDIASpec(&unfolded, t.TempDir(), nil, false); err == nil || !strings.HasPrefix(err.Error(), "read ") {
		t.Errorf("a directory as /proc/devices: %v, want a read error", err)
	}
}
