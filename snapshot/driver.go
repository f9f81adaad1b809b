package snapshot

import (
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// HostDriverVersion is the loaded NVIDIA kernel module's version
// ("580.159.04"), read from the host's /proc/driver/nvidia/version before a
// trace starts (the tracer reads in-band results by it); "" when no driver
// is loaded or the file is unreadable.
func HostDriverVersion() string {
	f, err := os.Open("/proc/driver/nvidia/version")
	if err != nil {
		return ""
	}
	defer func() { _ = f.Close() }()            // read-only: a failed close loses nothing
	b, _ := io.ReadAll(io.LimitReader(f, 4096)) // its first line is all it needs
	first, _, _ := strings.Cut(string(b), "\n")
	return parseDriverVersion(first)
}

// collectDriver reads the NVIDIA kernel driver's state. On a host without
// the driver every file is missing, which is a fact (Loaded=false), not an
// error.
func (c *collector) collectDriver() {
	d := &c.snap.Driver
	nvProc := filepath.Join(c.proc, "driver", "nvidia")
	_, errSys := os.Stat(filepath.Join(c.sys, "module", "nvidia"))
	_, errProc := os.Stat(nvProc)
	d.Loaded = errSys == nil || errProc == nil

	if text, ok := c.readOptional("/proc/driver/nvidia/version", filepath.Join(nvProc, "version")); ok {
		first, _, _ := strings.Cut(text, "\n")
		c.snap.Host.DriverLine = strings.TrimSpace(first)
		c.snap.Host.DriverVersion = parseDriverVersion(first)
	}
	if text, ok := c.readOptional("/proc/driver/nvidia/params", filepath.Join(nvProc, "params")); ok {
		d.Params = ParseNVIDIAParams(text)
	}
	if names, err := c.readDirNames("/", filepath.Join(nvProc, "gpus")); err == nil {
		sort.Strings(names)
		d.GPUs = names
	}
	uvmDir := filepath.Join(c.sys, "module", "nvidia_uvm", "parameters")
	if names, err := c.readDirNames("/", uvmDir); err == nil {
		for _, n := range names {
			if text, ok := c.readOptional("nvidia_uvm parameter "+n, filepath.Join(uvmDir, n)); ok {
				if d.UVMParams == nil {
					d.UVMParams = map[string]string{}
				}
				d.UVMParams[n] = strings.TrimSpace(text)
			}
		}
	}
	if text, ok := c.readOptional("/proc/modules", filepath.Join(c.proc, "modules")); ok {
		for _, line := range strings.Split(text, "\n") {
			if name, _, _ := strings.Cut(line, " "); strings.HasPrefix(name, "nvidia") {
				d.Modules = append(d.Modules, name)
			}
		}
	}
}
