package snapshot

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// DriverState is what the driver's files, the process list and nvidia-smi
// say about the state of the NVIDIA driver, beyond Driver: the facts that
// decide cuInit 3, 802, 803 and 46 while every device open works. Collect
// and SurveyHost fill it the same way, so doctor and the trace's analysis
// judge the same facts.
type DriverState struct {
	GPUs          []GPUInfo `json:"gpus,omitempty"`
	ModuleVersion string    `json:"module_version,omitempty"` // /sys/module/nvidia/version
	// Firmware is where GSP firmware files for the running driver version
	// were looked for and found.
	Firmware Firmware `json:"firmware"`
	// KernelConfig holds the few CONFIG_ options the checks need (HMM),
	// from /proc/config.gz or /boot/config-RELEASE; empty when neither is
	// readable.
	KernelConfig map[string]string `json:"kernel_config,omitempty"`
	// NVSwitches are the NVSwitch devices the driver found
	// (/proc/driver/nvidia-nvswitch/devices).
	NVSwitches []string `json:"nvswitches,omitempty"`
	// Daemons are the NVIDIA daemons running (by comm):
	// nv-fabricmanager, nvidia-persistenced.
	Daemons []string `json:"daemons,omitempty"`
	// SMI is nvidia-smi's view of persistence and compute mode; nil with
	// SMIError when it could not be asked.
	SMI      []SMIGPU `json:"smi,omitempty"`
	SMIError string   `json:"smi_error,omitempty"`
}

// OpenModule is whether the running kernel module is the open one ("NVIDIA
// UNIX Open Kernel Module" in /proc/driver/nvidia/version's first line).
func (h Host) OpenModule() bool { return strings.Contains(h.DriverLine, "Open Kernel Module") }

// collectDriverState reads the driver facts beyond /proc/driver/nvidia's
// params: module version, GPUs, NVSwitches, GSP firmware files, kernel
// config, NVIDIA daemons, and (when asked) nvidia-smi's modes.
func (c *collector) collectDriverState() {
	base := c.snap
	if !base.Driver.Loaded {
		return
	}
	sv := &DriverState{}
	base.DriverState = sv
	// Decompressing /proc/config.gz is the longest read here (~2.5 ms on
	// the VM); it sets only sv.KernelConfig.
	configRead := make(chan struct{})
	go func() {
		defer close(configRead)
		sv.collectKernelConfig(c, base.Host.Kernel)
	}()
	if v, err := c.fs.readString(filepath.Join(c.sys, "module", "nvidia", "version"), maxFileSize); err == nil {
		sv.ModuleVersion = strings.TrimSpace(v)
	}
	gpuDir := filepath.Join(c.proc, "driver", "nvidia", "gpus")
	for _, bus := range base.Driver.GPUs {
		g := GPUInfo{Bus: bus, Minor: -1}
		if text, err := c.fs.readString(filepath.Join(gpuDir, bus, "information"), maxFileSize); err == nil {
			for _, line := range strings.Split(text, "\n") {
				k, v, ok := strings.Cut(line, ":")
				if !ok {
					continue
				}
				v = strings.TrimSpace(v)
				switch strings.TrimSpace(k) {
				case "Model":
					g.Model = v
				case "Device Minor":
					if n, err := strconv.Atoi(v); err == nil {
						g.Minor = n
					}
				case "Excluded":
					g.Excluded = strings.EqualFold(v, "yes")
				}
			}
		}
		sv.GPUs = append(sv.GPUs, g)
	}
	if names, err := os.ReadDir(filepath.Join(c.proc, "driver", "nvidia-nvswitch", "devices")); err == nil {
		for _, n := range names {
			sv.NVSwitches = append(sv.NVSwitches, n.Name())
		}
	}

	ver := base.Host.DriverVersion
	if ver == "" {
		ver = sv.ModuleVersion
	}
	if ver != "" {
		sv.Firmware.Version = ver
		rel := base.Host.Kernel
		var dirs []string
		if p, err := c.fs.readString(filepath.Join(c.sys, "module", "firmware_class", "parameters", "path"), maxFileSize); err == nil && strings.TrimSpace(p) != "" {
			dirs = append(dirs, strings.TrimSpace(p))
		}
		dirs = append(dirs, "/lib/firmware/updates/"+rel, "/lib/firmware/updates", "/lib/firmware/"+rel, "/lib/firmware")
		for _, d := range dirs {
			d = filepath.Join(d, "nvidia", ver)
			sv.Firmware.Searched = append(sv.Firmware.Searched, d)
			if names, err := c.fs.readDirNames(c.hostRoot, d); err == nil {
				sort.Strings(names)
				for _, n := range names {
					if strings.HasPrefix(n, "gsp") && strings.HasSuffix(n, ".bin") {
						sv.Firmware.Files = append(sv.Firmware.Files, filepath.Join(d, n))
					}
				}
			}
		}
	}
	c.collectDaemons(sv)
	<-configRead
	if c.opts.NvidiaSMI != "" {
		sv.collectSMI(c.opts.NvidiaSMI)
	}
}

var kernelConfigKeys = []string{"CONFIG_HMM_MIRROR", "CONFIG_DEVICE_PRIVATE"}

func (sv *DriverState) collectKernelConfig(c *collector, release string) {
	var cfg io.Reader
	if f, err := os.Open(filepath.Join(c.proc, "config.gz")); err == nil {
		defer func() { _ = f.Close() }() // read-only: a failed close loses nothing
		if zr, err := gzip.NewReader(f); err == nil {
			cfg = io.LimitReader(zr, 16<<20)
		}
	}
	if cfg == nil {
		text, _ := c.fs.readFileInRoot(c.hostRoot, "/boot/config-"+release, maxFileSize)
		if text == nil {
			return
		}
		cfg = bytes.NewReader(text)
	}
	sv.KernelConfig = scanKernelConfig(cfg)
}

// scanKernelConfig reads the kernelConfigKeys' values from a .config:
// "n" for a key that is not set or absent. It stops once every key was
// seen (as KEY=v or "# KEY is not set"): splitting all ~10k lines of a
// whole config took ~2.5 ms.
func scanKernelConfig(r io.Reader) map[string]string {
	vals := map[string]string{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for len(vals) < len(kernelConfigKeys) && sc.Scan() {
		line := sc.Text()
		for _, k := range kernelConfigKeys {
			if v, ok := strings.CutPrefix(line, k+"="); ok {
				vals[k] = v
			} else if line == "# "+k+" is not set" {
				vals[k] = "n"
			}
		}
	}
	for _, k := range kernelConfigKeys {
		if _, ok := vals[k]; !ok {
			vals[k] = "n"
		}
	}
	return vals
}

// daemonComms are the NVIDIA daemons worth knowing about, by their
// (15-byte) comm.
var daemonComms = map[string]string{"nv-fabricmanager": "nv-fabricmanager", "nvidia-persiste": "nvidia-persistenced"}

func (c *collector) collectDaemons(sv *DriverState) {
	entries, err := os.ReadDir(c.proc)
	if err != nil {
		c.unavailable("process list", err)
		return
	}
	found := map[string]bool{}
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		// procfs's own file of at most 16 bytes: read directly, not
		// through the guard (a goroutine, a timer and a reopen per file,
		// ~75 µs each on the VM, for every process on the host).
		comm, err := readProcComm(filepath.Join(c.proc, e.Name(), "comm"))
		if err != nil {
			continue
		}
		if d, ok := daemonComms[strings.TrimSpace(comm)]; ok && !found[d] {
			found[d] = true
			sv.Daemons = append(sv.Daemons, d)
		}
	}
	sort.Strings(sv.Daemons)
}

// readProcComm reads a /proc/PID/comm: a name of at most 15 bytes.
func readProcComm(name string) (string, error) {
	fd, err := unix.Open(name, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return "", err
	}
	defer func() { _ = unix.Close(fd) }() // read-only: a failed close loses nothing
	var buf [64]byte
	n, err := unix.Read(fd, buf[:])
	if err != nil {
		return "", err
	}
	return string(buf[:max(n, 0)]), nil
}

// collectSMI asks nvidia-smi for persistence and compute mode, which only
// NVML knows. It is a read-only query, bounded in time and output.
func (sv *DriverState) collectSMI(smi string) {
	if smi == "auto" {
		for _, p := range []string{"nvidia-smi", "/usr/local/nvidia/bin/nvidia-smi", "/usr/bin/nvidia-smi"} {
			if lp, err := exec.LookPath(p); err == nil {
				smi = lp
				break
			}
		}
		if smi == "" {
			sv.SMIError = "nvidia-smi not found on PATH"
			return
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), smiTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, smi, "--query-gpu=pci.bus_id,persistence_mode,compute_mode", "--format=csv,noheader")
	var out, errOut cappedBuffer
	out.limit, errOut.limit = 64<<10, 4<<10
	cmd.Stdout, cmd.Stderr = &out, &errOut
	cmd.WaitDelay = time.Second
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(firstLine(out.String() + "\n" + errOut.String()))
		if ctx.Err() != nil {
			msg = "timed out after " + smiTimeout.String()
		}
		sv.SMIError = strings.TrimSpace(fmt.Sprintf("%s: %v %s", smi, err, msg))
		return
	}
	for _, line := range strings.Split(out.String(), "\n") {
		f := strings.Split(line, ",")
		if len(f) != 3 {
			continue
		}
		sv.SMI = append(sv.SMI, SMIGPU{Bus: strings.TrimSpace(f[0]), Persistence: strings.TrimSpace(f[1]), ComputeMode: strings.TrimSpace(f[2])})
	}
}

func firstLine(s string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.TrimSpace(l) != "" {
			return l
		}
	}
	return ""
}

// cappedBuffer keeps the first limit bytes written and drops the rest.
type cappedBuffer struct {
	bytes.Buffer
	limit int
}

func (b *cappedBuffer) Write(p []byte) (int, error) {
	if room := b.limit - b.Len(); room > 0 {
		b.Buffer.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}
