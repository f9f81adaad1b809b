// Package loader is the loader's side of tracer/launch: the process that
// waits on a pipe until the tracer is attached, then execs the target.
//
// It runs from this package's init and imports nothing but syscall: Go
// initialises packages in import-path order among those whose imports are
// done, so one whose only import is syscall runs before any package that
// needs os, fmt or reflect (and, through the go.mod's whole import graph,
// before the crypto, protobuf and renderer inits that preceded the loader
// when it ran from tracer/launch: issue 31). Every helper that launch
// starts (the ptrace waker, the signal sentinel) is a loader too, so each
// of them starts as fast.
package loader

import (
	"runtime"
	"syscall"
	"unsafe"
)

// Arg0 is the loader's argv[0], which marks a process as the loader; the
// target's argv follows it (what ps shows while the loader waits).
const Arg0 = "cudatrace-loader"

// ConfigMagic starts the configuration on the pipe, so that a process
// started as Arg0 by anything else fails cleanly.
const ConfigMagic = "cudatrace-loader-config\x01"

// MaxConfig bounds the configuration the loader reads (a seccomp filter
// has at most 4096 instructions of 8 bytes).
const MaxConfig = 1 << 20

// ReleaseFD is the pipe the loader reads its configuration from and then
// waits on (the first ExtraFiles entry).
const ReleaseFD = 3

// Configuration flags, the payload's first byte.
const (
	FlagCred       = 1 << 0
	FlagNoNewPrivs = 1 << 1
)

// Config is what the loader reads from the pipe, after ConfigMagic and the
// payload's length (uint32, little-endian). Nothing in it comes from the
// target's argv or environment. The payload, all integers little-endian
// uint32 unless said: flags (a byte); with FlagCred the UID, the GID, the
// number of groups, the groups, the user name's length and the name (for
// messages only); the number of seccomp instructions, then each as code
// (uint16), jt, jf (bytes) and k.
type Config struct {
	Cred       bool
	UID, GID   uint32
	Groups     []uint32
	User       string
	Seccomp    []syscall.SockFilter
	NoNewPrivs bool
}

// Encode returns the configuration as the loader reads it, magic and
// length included.
func (c *Config) Encode() []byte {
	var p []byte
	var flags byte
	if c.Cred {
		flags |= FlagCred
	}
	if c.NoNewPrivs {
		flags |= FlagNoNewPrivs
	}
	p = append(p, flags)
	if c.Cred {
		p = put32(p, c.UID)
		p = put32(p, c.GID)
		p = put32(p, uint32(len(c.Groups)))
		for _, g := range c.Groups {
			p = put32(p, g)
		}
		p = put32(p, uint32(len(c.User)))
		p = append(p, c.User...)
	}
	p = put32(p, uint32(len(c.Seccomp)))
	for _, f := range c.Seccomp {
		p = append(p, byte(f.Code), byte(f.Code>>8), f.Jt, f.Jf)
		p = put32(p, f.K)
	}
	out := append([]byte(ConfigMagic), 0, 0, 0, 0)
	putAt32(out[len(ConfigMagic):], uint32(len(p)))
	return append(out, p...)
}

func put32(b []byte, v uint32) []byte {
	return append(b, byte(v), byte(v>>8), byte(v>>16), byte(v>>24))
}

func putAt32(b []byte, v uint32) {
	b[0], b[1], b[2], b[3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
}

// decoder reads a payload; a read past its end sets bad.
type decoder struct {
	b   []byte
	bad bool
}

func (d *decoder) u32() uint32 {
	if len(d.b) < 4 {
		d.bad = true
		return 0
	}
	v := uint32(d.b[0]) | uint32(d.b[1])<<8 | uint32(d.b[2])<<16 | uint32(d.b[3])<<24
	d.b = d.b[4:]
	return v
}

func (d *decoder) bytes(n uint32) []byte {
	if uint64(len(d.b)) < uint64(n) {
		d.bad = true
		return nil
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}

// Decode parses a payload (what follows the magic and the length).
func Decode(p []byte) (*Config, bool) {
	if len(p) < 1 || p[0]&^(FlagCred|FlagNoNewPrivs) != 0 {
		return nil, false
	}
	c := &Config{Cred: p[0]&FlagCred != 0, NoNewPrivs: p[0]&FlagNoNewPrivs != 0}
	d := &decoder{b: p[1:]}
	if c.Cred {
		c.UID, c.GID = d.u32(), d.u32()
		n := d.u32()
		if uint64(n)*4 > uint64(len(d.b)) {
			return nil, false
		}
		c.Groups = make([]uint32, n)
		for i := range c.Groups {
			c.Groups[i] = d.u32()
		}
		c.User = string(d.bytes(d.u32()))
	}
	n := d.u32()
	if uint64(n)*8 != uint64(len(d.b)) || n > 0xffff {
		return nil, false
	}
	c.Seccomp = make([]syscall.SockFilter, n)
	for i := range c.Seccomp {
		b := d.bytes(4)
		if d.bad {
			return nil, false
		}
		c.Seccomp[i] = syscall.SockFilter{Code: uint16(b[0]) | uint16(b[1])<<8, Jt: b[2], Jf: b[3], K: d.u32()}
	}
	if d.bad {
		return nil, false
	}
	return c, true
}

func init() {
	// Without os, argv is the kernel's copy. Where /proc cannot be read,
	// tracer/launch's init runs the loader from os.Args instead.
	argv := readAll("/proc/self/cmdline")
	if isLoader(argv) {
		Main(splitNUL(argv)[1:])
	}
}

// Main runs the loader on the target's argv and exits. It must be called
// from an init: the loader must exec from the thread-group leader (a ptrace
// backend seizes only that thread, and seccomp filters are per thread), and
// init runs on the main thread, pinned there before the runtime moves us.
func Main(argv []string) {
	runtime.LockOSThread()
	exit(run(argv))
}

// isLoader reports whether a /proc/PID/cmdline is a loader's.
func isLoader(cmdline []byte) bool {
	return len(cmdline) > len(Arg0)+1 && string(cmdline[:len(Arg0)+1]) == Arg0+"\x00"
}

func exit(code int) {
	syscall.Exit(code)
}

// readAll reads a /proc file whole; nil when it cannot be read.
func readAll(path string) []byte {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	defer func() { _ = syscall.Close(fd) }() // read-only: nothing to do if it fails
	b := make([]byte, 0, 4096)
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := syscall.Read(fd, b[len(b):cap(b)])
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return nil
		}
		if n == 0 {
			return b
		}
		b = b[:len(b)+n]
	}
}

// SplitNUL splits NUL-terminated strings.
func SplitNUL(b []byte) []string { return splitNUL(b) }

func splitNUL(b []byte) []string {
	out := []string{}
	for len(b) > 0 {
		i := 0
		for i < len(b) && b[i] != 0 {
			i++
		}
		out = append(out, string(b[:i]))
		if i == len(b) {
			break // unterminated last entry
		}
		b = b[i+1:]
	}
	return out
}

// readFull reads len(b) bytes from fd.
func readFull(fd int, b []byte) bool {
	for len(b) > 0 {
		n, err := syscall.Read(fd, b)
		if err == syscall.EINTR {
			continue
		}
		if err != nil || n == 0 {
			return false
		}
		b = b[n:]
	}
	return true
}

func readConfig(fd int) (*Config, bool) {
	head := make([]byte, len(ConfigMagic)+4)
	if !readFull(fd, head) || string(head[:len(ConfigMagic)]) != ConfigMagic {
		return nil, false
	}
	d := &decoder{b: head[len(ConfigMagic):]}
	n := d.u32()
	if n > MaxConfig {
		return nil, false
	}
	p := make([]byte, n)
	if !readFull(fd, p) {
		return nil, false
	}
	return Decode(p)
}

// fail writes "cudatrace: " and parts to stderr and returns code.
func fail(code int, parts ...string) int {
	msg := "cudatrace: "
	for _, p := range parts {
		msg += p
	}
	_, _ = syscall.Write(2, []byte(msg+"\n")) // nowhere else to say it
	return code
}

func itoa(v uint32) string {
	if v == 0 {
		return "0"
	}
	var b [10]byte
	i := len(b)
	for v > 0 {
		i--
		b[i] = byte('0' + v%10)
		v /= 10
	}
	return string(b[i:])
}

const prSetNoNewPrivs = 38

const seccompSetModeFilter = 1

func run(argv []string) int {
	if len(argv) == 0 {
		return fail(1, "loader: bad configuration")
	}
	cfg, ok := readConfig(ReleaseFD)
	if !ok {
		return fail(1, "loader: bad configuration")
	}
	// Our own environment is the target's, as Start passed it, byte for
	// byte: /proc's, as the kernel gave it.
	var env []string
	if b := readAll("/proc/self/environ"); b != nil {
		env = splitNUL(b)
	} else {
		env = syscall.Environ() // drops empty entries only
	}
	var b [1]byte
	for {
		n, err := syscall.Read(ReleaseFD, b[:])
		if err == syscall.EINTR {
			continue
		}
		if n != 1 {
			return 1 // the tracer gave up; it reports why
		}
		break
	}
	_ = syscall.Close(ReleaseFD) // best-effort cleanup: nothing to do if it fails

	// The filter goes in while we are still root (no no_new_privs needed),
	// before the credentials drop.
	if len(cfg.Seccomp) > 0 {
		if sysSeccomp == 0 {
			return fail(1, "install seccomp filter: ", syscall.ENOSYS.Error())
		}
		if cfg.NoNewPrivs {
			if _, _, errno := syscall.RawSyscall6(syscall.SYS_PRCTL, prSetNoNewPrivs, 1, 0, 0, 0, 0); errno != 0 {
				return fail(1, "set no_new_privs: ", errno.Error())
			}
		}
		prog := syscall.SockFprog{Len: uint16(len(cfg.Seccomp)), Filter: &cfg.Seccomp[0]}
		if _, _, errno := syscall.RawSyscall(sysSeccomp, seccompSetModeFilter, 0, uintptr(unsafe.Pointer(&prog))); errno != 0 {
			return fail(1, "install seccomp filter: ", errno.Error())
		}
	}
	if cfg.Cred {
		groups := make([]int, len(cfg.Groups))
		for i, g := range cfg.Groups {
			groups[i] = int(g)
		}
		if err := syscall.Setgroups(groups); err != nil {
			return fail(1, "setgroups for ", cfg.User, ": ", err.Error())
		}
		if err := syscall.Setgid(int(cfg.GID)); err != nil {
			return fail(1, "setgid ", itoa(cfg.GID), ": ", err.Error())
		}
		if err := syscall.Setuid(int(cfg.UID)); err != nil {
			return fail(1, "setuid ", itoa(cfg.UID), ": ", err.Error())
		}
	}
	// The exec is the first traced call: let it carry the target's name,
	// not "cudatrace", in the report.
	name := argv[0]
	for i := len(name) - 1; i >= 0; i-- {
		if name[i] == '/' {
			name = name[i+1:]
			break
		}
	}
	if len(name) > 15 {
		name = name[:15]
	}
	cname := append([]byte(name), 0)
	_, _, _ = syscall.RawSyscall6(syscall.SYS_PRCTL, syscall.PR_SET_NAME, uintptr(unsafe.Pointer(&cname[0])), 0, 0, 0, 0) // cosmetic: the name in ps
	err := syscall.Exec(argv[0], argv, env)
	code := 126
	if err == syscall.ENOENT {
		code = 127
	}
	return fail(code, "cannot run ", argv[0], ": ", err.Error())
}
