package ebpf

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
	"golang.org/x/sys/unix"

	"github.com/cudatrace/cudatrace/tracer"
)

// unavailableError is a one-line reason this host cannot run the eBPF
// backend. It matches tracer.ErrUnavailable so that --backend auto falls back.
type unavailableError struct{ reason string }

func (e *unavailableError) Error() string        { return e.reason }
func (e *unavailableError) Is(target error) bool { return target == tracer.ErrUnavailable }

func unavailable(format string, args ...any) error {
	return &unavailableError{fmt.Sprintf(format, args...)}
}

const (
	capSysAdmin = 21
	capPerfmon  = 38
	capBPF      = 39
)

// checkPrivileges says, before anything is loaded, what is missing.
func checkPrivileges() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return unavailable("cannot read own capabilities: %v", err)
	}
	has := func(c uint) bool { return data[c/32].Effective&(1<<(c%32)) != 0 }
	if !has(capSysAdmin) && !(has(capBPF) && has(capPerfmon)) {
		return unavailable("needs root or CAP_BPF+CAP_PERFMON: running as uid %d", os.Geteuid())
	}
	if lockdownForbidsBPF("/sys/kernel/security/lockdown") {
		return unavailable("kernel lockdown forbids BPF")
	}
	return nil
}

// lockdownForbidsBPF: "confidentiality" lockdown denies reading kernel
// memory from BPF, which every program here does.
func lockdownForbidsBPF(path string) bool {
	b, err := os.ReadFile(path)
	return err == nil && strings.Contains(string(b), "[confidentiality]")
}

// vmlinuxBTF is where the kernel publishes its BTF.
const vmlinuxBTF = "/sys/kernel/btf/vmlinux"

// Probe is a cheap check that the eBPF backend can work here: privileges,
// kernel BTF, and the load of a trivial program. It loads nothing it keeps,
// and starts parsing the kernel's BTF for the Run that usually follows.
func Probe() error {
	if err := checkPrivileges(); err != nil {
		return err
	}
	// The programs filter by the kernel's PIDs; in a PID namespace of its
	// own (a container) cudatrace knows only the namespace's, and would
	// trace nothing, then wait for a process the filter never saw exit.
	if !inInitialPIDNamespace() {
		return unavailable("cudatrace runs in a PID namespace of its own (a container): the eBPF programs would not know its PIDs")
	}
	if _, err := os.Stat(vmlinuxBTF); err != nil {
		// Elsewhere (a vmlinux under /boot) only a full parse can tell.
		if _, err := btf.LoadKernelSpec(); err != nil {
			return unavailable("BPF not supported: no kernel BTF: %v", err)
		}
	}
	// Below the minimum kernel: one line naming the feature missing.
	if err := kernelSupport().missing; err != nil {
		return err
	}
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type:         ebpf.SocketFilter,
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()},
		License:      "GPL",
	})
	if err != nil {
		return loadError(err, false)
	}
	warmKernelBTF()
	return prog.Close()
}

// loadError classifies a failure to load BPF objects.
func loadError(err error, debug bool) error {
	var ve *ebpf.VerifierError
	switch {
	case errors.As(err, &ve):
		if debug {
			return unavailable("BPF program rejected by the verifier: %+v", ve)
		}
		return unavailable("BPF program rejected by the verifier (--debug shows the log): %v", ve)
	case errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES):
		return unavailable("BPF not permitted: %v", err)
	default:
		return unavailable("BPF not supported: %v", err)
	}
}

// warm is the kernel's BTF being parsed ahead of a load (~30 ms, the
// largest part of start-up); the next load takes it over.
var warm struct {
	sync.Mutex
	cache *btf.Cache
}

// parseKernelBTF returns a cache whose kernel types are being parsed in the
// background; configure reports a failure to parse.
func parseKernelBTF() *btf.Cache {
	growFDTableAhead() // the load that follows needs it
	c := btf.NewCache()
	go func() { _, _ = c.Kernel() }() // configure reports the error, from the cache
	return c
}

func warmKernelBTF() {
	c := parseKernelBTF()
	warm.Lock()
	warm.cache = c
	warm.Unlock()
}

// kernelBTF returns the cache warmKernelBTF filled, or starts a parse: either
// way the caller goes on while it runs. Taking it lets the parsed types be
// collected once the load is done.
func kernelBTF() *btf.Cache {
	warm.Lock()
	c := warm.cache
	warm.cache = nil
	warm.Unlock()
	if c == nil {
		c = parseKernelBTF()
	}
	return c
}
