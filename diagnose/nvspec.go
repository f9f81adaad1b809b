package diagnose

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/cudatrace/cudatrace/diagnose/record"
	"github.com/cudatrace/cudatrace/nvdev"
	"github.com/cudatrace/cudatrace/nvdev/nvfile"
	"github.com/cudatrace/cudatrace/snapshot"
	"github.com/cudatrace/cudatrace/tracer"
)

// NVIDIASpec fills the backend's NVIDIA settings, the same for a trace, an
// attach and cudatrace watch: which majors are NVIDIA devices (from
// procDevices, plus extra), where the running driver puts its in-band
// results, and, with fold, the repeats the backend may count rather than
// send. A missing procDevices is no NVIDIA driver; an unreadable one an
// error.
func NVIDIASpec(spec *tracer.Spec, procDevices string, extra []uint, fold bool) error {
	text, err := os.ReadFile(procDevices)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("read %s: %v", procDevices, err)
	}
	spec.DeviceMajors = nvidiaMajors(snapshot.ParseProcDevices(string(text)), extra)
	// Where the driver's in-band results lie depends on its version.
	spec.InbandStatus = nvdev.InbandStatusWords(snapshot.HostDriverVersion())
	if fold {
		// Repeats the report would only count need not reach it.
		spec.FoldIoctlsAfter, spec.FoldCallsAfter = record.IoctlSamplePerSite, record.SamplePerSite
	}
	return nil
}

// nvidiaMajors picks the majors whose fds count as NVIDIA devices. 195 is
// fixed by the driver, so it is included even when nothing is registered.
func nvidiaMajors(devs []snapshot.DriverMajor, extra []uint) []uint32 {
	seen := map[uint32]bool{nvfile.Major: true}
	out := []uint32{nvfile.Major}
	add := func(m uint32) {
		if !seen[m] {
			seen[m] = true
			out = append(out, m)
		}
	}
	for _, d := range devs {
		if strings.HasPrefix(d.Name, "nvidia") {
			add(d.Major)
		}
	}
	for _, m := range extra {
		add(uint32(m))
	}
	return out
}
