package nvdev

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/cudatrace/cudatrace/internal/sysabi"
	"github.com/cudatrace/cudatrace/nvdev/nvfile"
	"github.com/cudatrace/cudatrace/tracer"
)

// RM escape numbers the analysis reacts to (nv-ioctl-numbers.h).
const (
	EscCheckVersionStr  = 0xD2
	escIoctlXferCmd     = 0xD3
	EscWaitOpenComplete = 0xDA
	rmIoctlMagic        = 0x46 // 'F'
	UVMInitialize       = 0x30000001
)

// OpenFlagsString renders open(2) flags the way strace does:
// O_RDWR|O_CLOEXEC (the table is internal/sysabi's).
func OpenFlagsString(flags uint64) string { return sysabi.OpenFlagsString(flags) }

// accessModeString renders access(2) modes: F_OK or R_OK|W_OK|X_OK.
func accessModeString(mode uint64) string {
	if mode == 0 {
		return "F_OK"
	}
	var parts []string
	for _, m := range []struct {
		bit  uint64
		name string
	}{{unix.R_OK, "R_OK"}, {unix.W_OK, "W_OK"}, {unix.X_OK, "X_OK"}} {
		if mode&m.bit != 0 {
			parts = append(parts, m.name)
			mode &^= m.bit
		}
	}
	if mode != 0 {
		parts = append(parts, fmt.Sprintf("%#x", mode))
	}
	return strings.Join(parts, "|")
}

// fileTypeString renders the S_IFMT part of a mode.
func fileTypeString(mode uint32) string {
	t, _ := sysabi.FileTypeOf(mode)
	return t.Symbol
}

// IoctlName names an ioctl request on an NVIDIA node. dev is the device the
// fd refers to, or nil when unknown (fd -1 after a failed open). Major 195
// carries RM escapes, keyed by _IOC_NR only because the driver ignores the
// other bits; other NVIDIA majors (nvidia-uvm) use plain numbers. Unknown
// requests come back in strace's _IOC notation.
func IoctlName(request uint32, dev *tracer.Dev) string {
	nr := request & 0xff
	typ := (request >> 8) & 0xff
	isRM := dev != nil && dev.Major == nvfile.Major
	if dev == nil && typ == rmIoctlMagic {
		isRM = true
	}
	if !isRM {
		if n, ok := uvmIoctlNames[request]; ok {
			return n
		}
		if typ == rmIoctlMagic {
			isRM = true
		}
	}
	if isRM {
		if n, ok := rmEscapeNames[nr]; ok {
			return n
		}
	}
	return rawIoctl(request)
}

// rawIoctl prints a request as strace does for unknown numbers.
func rawIoctl(request uint32) string {
	dir := request >> 30
	var d string
	switch dir {
	case 0:
		d = "_IOC_NONE"
	case 1:
		d = "_IOC_WRITE"
	case 2:
		d = "_IOC_READ"
	case 3:
		d = "_IOC_READ|_IOC_WRITE"
	}
	return fmt.Sprintf("_IOC(%s, %s, %s, %s)", d, hex0((request>>8)&0xff), hex0(request&0xff), hex0((request>>16)&0x3fff))
}

// hex0 prints like strace's %#x: 0 stays "0".
func hex0(v uint32) string {
	if v == 0 {
		return "0"
	}
	return fmt.Sprintf("%#x", v)
}

// IsRMRequest reports whether request is RM escape nr on a 195 node (or an
// unknown node with the 'F' magic).
func IsRMRequest(e *tracer.Event, nr uint32) bool {
	if e.Request&0xff != nr {
		return false
	}
	if e.Dev != nil {
		return e.Dev.Major == nvfile.Major
	}
	return (e.Request>>8)&0xff == rmIoctlMagic
}

// WaitOpenResult reads NV_ESC_WAIT_OPEN_COMPLETE's result (int rc @0, NvU32
// adapterStatus @4): a non-blocking open's real outcome.
func WaitOpenResult(e *tracer.Event) (rc int32, status uint32, ok bool) {
	if !IsRMRequest(e, EscWaitOpenComplete) || e.Failed() || len(e.Arg) < 8 {
		return 0, 0, false
	}
	return int32(binary.LittleEndian.Uint32(e.Arg[0:4])), binary.LittleEndian.Uint32(e.Arg[4:8]), true
}

// StatusName renders an NV_STATUS code: "NV_ERR_INVALID_STATE (0x40): Invalid
// state".
func StatusName(code uint32) string {
	if s, ok := nvStatusNames[code]; ok {
		return fmt.Sprintf("%s (%#x): %s", s[0], code, s[1])
	}
	return fmt.Sprintf("NV_STATUS %#x", code)
}

// CUResultName renders a CUresult value: "CUDA_ERROR_UNKNOWN (999)".
func CUResultName(code int) string {
	if n, ok := cuResultNames[code]; ok {
		return fmt.Sprintf("%s (%d)", n, code)
	}
	return fmt.Sprintf("CUresult %d", code)
}

// UVMInitStatus reads rmStatus (@8) from UVM_INITIALIZE's params block as
// returned by the call, if the tracer captured it.
func UVMInitStatus(e *tracer.Event) (uint32, bool) {
	if e.Request != UVMInitialize || len(e.Arg) < 12 {
		return 0, false
	}
	return binary.LittleEndian.Uint32(e.Arg[8:12]), true
}

// FormatCall renders an event like strace: openat("/dev/nvidia-uvm",
// O_RDWR|O_CLOEXEC), ioctl(8, NV_ESC_RM_CONTROL). The result is not
// included; callers add "→ EPERM" where it matters.
func FormatCall(e *tracer.Event) string {
	if e == nil {
		return ""
	}
	name := e.Syscall
	if name == "" {
		name = DefaultSyscall(e.Kind)
	}
	q := strconv.Quote
	switch e.Kind {
	case tracer.KindOpen:
		s := fmt.Sprintf("%s(%s, %s", name, q(e.Path), OpenFlagsString(e.Flags))
		if e.Flags&unix.O_CREAT != 0 || e.Flags&unix.O_TMPFILE == unix.O_TMPFILE {
			s += fmt.Sprintf(", %#o", e.Mode&0o7777)
		}
		return s + ")"
	case tracer.KindIoctl:
		req := IoctlName(e.Request, e.Dev)
		if e.Request&0xff == escIoctlXferCmd && len(e.Arg) >= 4 && strings.HasPrefix(req, "NV_ESC_") {
			inner := binary.LittleEndian.Uint32(e.Arg[0:4])
			if n, ok := rmEscapeNames[inner&0xff]; ok {
				req += "(" + n + ")"
			}
		}
		if obj := rmObject(req, e.Arg); obj != "" {
			req += " " + obj
		}
		return fmt.Sprintf("%s(%d, %s)", name, e.FD, req)
	case tracer.KindStat, tracer.KindUnlink:
		return fmt.Sprintf("%s(%s)", name, q(e.Path))
	case tracer.KindAccess:
		return fmt.Sprintf("%s(%s, %s)", name, q(e.Path), accessModeString(e.Flags))
	case tracer.KindMknod:
		s := fmt.Sprintf("%s(%s, ", name, q(e.Path))
		if t := fileTypeString(e.Mode); t != "" {
			s += t + "|"
		}
		s += fmt.Sprintf("%#o", e.Mode&0o7777)
		if e.Dev != nil {
			s += fmt.Sprintf(", makedev(%d, %d)", e.Dev.Major, e.Dev.Minor)
		}
		return s + ")"
	case tracer.KindSymlink:
		return fmt.Sprintf("%s(%s, %s)", name, q(e.Target), q(e.Path))
	case tracer.KindMkdir:
		return fmt.Sprintf("%s(%s, %#o)", name, q(e.Path), e.Mode&0o7777)
	case tracer.KindMemfd:
		return fmt.Sprintf("%s(%s, %#x)", name, q(e.Path), e.Flags)
	case tracer.KindSeccomp:
		return SeccompCall(name, e)
	case tracer.KindExec:
		args := make([]string, len(e.Argv))
		for i, a := range e.Argv {
			args[i] = q(a)
		}
		return fmt.Sprintf("%s(%s, [%s])", name, q(e.Path), strings.Join(args, ", "))
	case tracer.KindExit:
		if e.Signal != 0 {
			return fmt.Sprintf("killed by %s", unix.SignalName(unix.Signal(e.Signal)))
		}
		return fmt.Sprintf("exit(%d)", e.ExitCode)
	case tracer.KindAPI:
		return e.Func + "()"
	}
	if e.Path != "" {
		return fmt.Sprintf("%s(%s)", name, q(e.Path))
	}
	return name + "()"
}

// FormatResult renders what a call returned: "→ EPERM", "→ 8".
func FormatResult(e *tracer.Event) string {
	if e.Kind == tracer.KindExit {
		return ""
	}
	if e.Kind == tracer.KindAPI {
		return "→ " + APIResult(e)
	}
	if e.NoReturn {
		return "never returned (SIGSYS)"
	}
	if e.Failed() {
		return "→ " + e.ErrnoName()
	}
	return fmt.Sprintf("→ %d", e.Ret)
}

// APIResult renders what a CUDA/NVML entry point returned: "999
// CUDA_ERROR_UNKNOWN", "0 CUDA_SUCCESS, count 1".
func APIResult(e *tracer.Event) string {
	s := fmt.Sprintf("%d %s", e.Ret, ReturnName(e.Func, e.Ret))
	if e.Out != nil {
		s += fmt.Sprintf(", count %d", *e.Out)
	}
	return s
}

// Caller renders the process that made a call: python3[4242].
func Caller(e *tracer.Event) string {
	comm := e.Comm
	if comm == "" {
		comm = "pid"
	}
	return fmt.Sprintf("%s[%d]", comm, e.PID)
}

// CallLine is the first Detail line of most findings: the call, who made
// it, and what it returned.
func CallLine(e *tracer.Event) string {
	return fmt.Sprintf("`%s` by %s %s", FormatCall(e), Caller(e), FormatResult(e))
}

// DefaultSyscall is the syscall a call of kind k is shown as when its
// event does not name one.
func DefaultSyscall(k tracer.Kind) string {
	switch k {
	case tracer.KindOpen:
		return "openat"
	case tracer.KindStat:
		return "stat"
	case tracer.KindMknod:
		return "mknodat"
	case tracer.KindMemfd:
		return "memfd_create"
	case tracer.KindExec:
		return "execve"
	case tracer.KindExit:
		return "exit"
	}
	return string(k)
}

// StatusShort is an NV_STATUS code's name alone: "NV_ERR_INVALID_STATE".
func StatusShort(code uint32) string {
	if s, ok := nvStatusNames[code]; ok {
		return s[0]
	}
	return fmt.Sprintf("NV_STATUS %#x", code)
}

// ReturnName names a return code of an entry point: CUresult for cu*,
// nvmlReturn_t for nvml*.
func ReturnName(fn string, code int64) string {
	if strings.HasPrefix(fn, "nvml") {
		if n, ok := nvmlReturnNames[int(code)]; ok {
			return n
		}
		return fmt.Sprintf("nvmlReturn_t %d", code)
	}
	if n, ok := cuResultNames[int(code)]; ok {
		return n
	}
	return fmt.Sprintf("CUresult %d", code)
}

// nvmlReturnNames maps an nvmlReturn_t value to its name (nvml.h, NVIDIA
// Management Library; the values are part of its stable ABI).
var nvmlReturnNames = map[int]string{
	0: "NVML_SUCCESS", 1: "NVML_ERROR_UNINITIALIZED", 2: "NVML_ERROR_INVALID_ARGUMENT",
	3: "NVML_ERROR_NOT_SUPPORTED", 4: "NVML_ERROR_NO_PERMISSION", 5: "NVML_ERROR_ALREADY_INITIALIZED",
	6: "NVML_ERROR_NOT_FOUND", 7: "NVML_ERROR_INSUFFICIENT_SIZE", 8: "NVML_ERROR_INSUFFICIENT_POWER",
	9: "NVML_ERROR_DRIVER_NOT_LOADED", 10: "NVML_ERROR_TIMEOUT", 11: "NVML_ERROR_IRQ_ISSUE",
	12: "NVML_ERROR_LIBRARY_NOT_FOUND", 13: "NVML_ERROR_FUNCTION_NOT_FOUND", 14: "NVML_ERROR_CORRUPTED_INFOROM",
	15: "NVML_ERROR_GPU_IS_LOST", 16: "NVML_ERROR_RESET_REQUIRED", 17: "NVML_ERROR_OPERATING_SYSTEM",
	18: "NVML_ERROR_LIB_RM_VERSION_MISMATCH", 19: "NVML_ERROR_IN_USE", 20: "NVML_ERROR_MEMORY",
	21: "NVML_ERROR_NO_DATA", 22: "NVML_ERROR_VGPU_ECC_NOT_SUPPORTED", 23: "NVML_ERROR_INSUFFICIENT_RESOURCES",
	24: "NVML_ERROR_FREQ_NOT_SUPPORTED", 25: "NVML_ERROR_ARGUMENT_VERSION_MISMATCH", 26: "NVML_ERROR_DEPRECATED",
	27: "NVML_ERROR_NOT_READY", 28: "NVML_ERROR_GPU_NOT_FOUND", 29: "NVML_ERROR_INVALID_STATE",
	999: "NVML_ERROR_UNKNOWN",
}

// SeccompCall renders a KindSeccomp event as the call that made it:
// seccomp(SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER) or
// prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER).
func SeccompCall(name string, e *tracer.Event) string {
	mode := "SECCOMP_MODE_FILTER"
	if e.Mode == 1 {
		mode = "SECCOMP_MODE_STRICT"
	}
	if name == "prctl" {
		return fmt.Sprintf("prctl(PR_SET_SECCOMP, %s)", mode)
	}
	if e.Mode == 1 {
		return name + "(SECCOMP_SET_MODE_STRICT)"
	}
	flags := fmt.Sprintf("%#x", e.Flags)
	switch e.Flags {
	case 0:
		flags = "0"
	case unix.SECCOMP_FILTER_FLAG_NEW_LISTENER:
		flags = "SECCOMP_FILTER_FLAG_NEW_LISTENER"
	}
	return fmt.Sprintf("%s(SECCOMP_SET_MODE_FILTER, %s)", name, flags)
}
