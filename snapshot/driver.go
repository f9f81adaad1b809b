package snapshot

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
)

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
