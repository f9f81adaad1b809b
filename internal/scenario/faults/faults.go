// Package faults makes CUDA initialisation fail with real kernel objects
// that are neither a cgroup nor a node: a seccomp filter that refuses chosen
// syscalls, and an RLIMIT_NOFILE too low for the driver's fds. Apply sets
// them on the calling process and execs the target, so the target's PID is
// the one that set them up (as systemd's SystemCallFilter= or a container
// runtime's init would).
//
// The filter is classic BPF built here rather than with a library:
// libseccomp-golang needs cgo (the scenario binaries are static), and
// elastic/go-seccomp-bpf has neither SECCOMP_RET_USER_NOTIF nor a masked
// compare for the ioctl type byte; the program is a dozen instructions, the
// same shape as the ptrace backend's own filter, and the tests check it
// against the kernel.
package faults

import (
	"encoding/binary"
	"fmt"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// Deny names one refused syscall, as written in Env.SeccompDeny and
// scripts/scenario --seccomp-deny.
type Deny struct {
	Name string // the spec: "ioctl", "ioctl:nvidia", "openat", ...
	nr   uint32
	// nvidiaOnly matches only ioctl requests whose type byte is NVIDIA's
	// 'F' (0x46): nvidiactl and nvidiaN, not nvidia-uvm, not a tty.
	nvidiaOnly bool
}

// NVIDIAIoctlType is the _IOC type byte of nvidia.ko's requests.
const NVIDIAIoctlType = 'F'

// Specs lists what ParseDeny accepts.
func Specs() []string {
	out := []string{"ioctl:nvidia"}
	for name := range syscallNumbers {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// ParseDeny reads "ioctl", "ioctl:nvidia", "openat", "open" (where the
// architecture has it), "memfd_create", "mknodat", "mknod".
func ParseDeny(spec string) (Deny, error) {
	name, qual, hasQual := strings.Cut(spec, ":")
	nr, ok := syscallNumbers[name]
	if !ok || (hasQual && (name != "ioctl" || qual != "nvidia")) {
		return Deny{}, fmt.Errorf("seccomp deny %q: want one of %s", spec, strings.Join(Specs(), ", "))
	}
	return Deny{Name: spec, nr: nr, nvidiaOnly: hasQual}, nil
}

// ParseDenies parses each spec; an empty list gives nil.
func ParseDenies(specs []string) ([]Deny, error) {
	var out []Deny
	for _, s := range specs {
		d, err := ParseDeny(s)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

// Actions a filter can take on a denied call, as written in
// Env.SeccompAction and faultexec --seccomp-action. "errno" (the default)
// refuses with EPERM; the others never let the call return: the kernel rolls
// it back and sends SIGSYS (kill-process, trap; kill-thread too when the
// thread is its process's last), or ends the thread (kill-thread).
var actions = map[string]uint32{
	"errno":        unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM),
	"kill-process": unix.SECCOMP_RET_KILL_PROCESS,
	"kill-thread":  unix.SECCOMP_RET_KILL_THREAD,
	"trap":         unix.SECCOMP_RET_TRAP,
}

// ParseAction reads one of the actions; "" is "errno".
func ParseAction(s string) (uint32, error) {
	if s == "" {
		s = "errno"
	}
	a, ok := actions[s]
	if !ok {
		names := make([]string, 0, len(actions))
		for n := range actions {
			names = append(names, n)
		}
		slices.Sort(names)
		return 0, fmt.Errorf("seccomp action %q: want one of %s", s, strings.Join(names, ", "))
	}
	return a, nil
}

// seccomp_data layout (linux/seccomp.h): nr, arch, instruction_pointer,
// then six 64-bit args.
const (
	offNr   = 0
	offArch = 4
	offArgs = 16
)

// argLow is the offset of the low 32 bits of argument i.
func argLow(i int) uint32 {
	off := uint32(offArgs + 8*i)
	if binary.NativeEndian.Uint16([]byte{0, 1}) == 1 { // big endian
		off += 4
	}
	return off
}

// Filter builds the program: for the native architecture, each denied
// syscall returns action (SECCOMP_RET_ERRNO|EPERM, or SECCOMP_RET_USER_NOTIF);
// everything else, and every other architecture or ABI, is allowed. It is a
// fault injector, not a sandbox: nothing here tries to be escape-proof.
func Filter(denies []Deny, action uint32) []unix.SockFilter {
	var b builder
	b.stmt(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, offArch)
	b.jumpIf(unix.BPF_JEQ, nativeArch, labelNext, labelAllow)
	b.stmt(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, offNr)
	for _, d := range denies {
		if !d.nvidiaOnly {
			b.jumpIf(unix.BPF_JEQ, d.nr, labelDeny, labelNext)
			continue
		}
		// nr == ioctl && (request & 0xff00) == 'F'<<8, then reload nr for
		// the next rule.
		b.jumpIf(unix.BPF_JEQ, d.nr, labelNext, 4)
		b.stmt(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, argLow(1))
		b.stmt(unix.BPF_ALU|unix.BPF_AND|unix.BPF_K, 0xff00)
		b.jumpIf(unix.BPF_JEQ, NVIDIAIoctlType<<8, labelDeny, labelNext)
		b.stmt(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, offNr)
	}
	return b.finish(action)
}

// Jump targets: labelNext is the following instruction; a positive number
// is that many instructions forward; labelAllow/labelDeny are the two
// returns at the end.
const (
	labelNext  = 0
	labelAllow = -1
	labelDeny  = -2
)

type builder struct {
	prog []unix.SockFilter
	// fix holds, per jump instruction, its symbolic targets.
	fix map[int][2]int
}

func (b *builder) stmt(code uint16, k uint32) {
	b.prog = append(b.prog, unix.SockFilter{Code: code, K: k})
}

func (b *builder) jumpIf(op uint16, k uint32, jt, jf int) {
	if b.fix == nil {
		b.fix = map[int][2]int{}
	}
	b.fix[len(b.prog)] = [2]int{jt, jf}
	b.prog = append(b.prog, unix.SockFilter{Code: unix.BPF_JMP | op | unix.BPF_K, K: k})
}

func (b *builder) finish(action uint32) []unix.SockFilter {
	allow, deny := len(b.prog), len(b.prog)+1
	b.stmt(unix.BPF_RET|unix.BPF_K, unix.SECCOMP_RET_ALLOW)
	b.stmt(unix.BPF_RET|unix.BPF_K, action)
	off := func(pc, target int) uint8 {
		switch target {
		case labelAllow:
			return uint8(allow - pc - 1)
		case labelDeny:
			return uint8(deny - pc - 1)
		}
		return uint8(target)
	}
	for pc, t := range b.fix {
		b.prog[pc].Jt, b.prog[pc].Jf = off(pc, t[0]), off(pc, t[1])
	}
	return b.prog
}
