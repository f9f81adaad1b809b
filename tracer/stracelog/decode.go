package stracelog

import (
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/cudatrace/cudatrace/internal/sysabi"
	"github.com/cudatrace/cudatrace/tracer"
	"golang.org/x/sys/unix"
)

// The tables below other than openFlags are Linux x86-64 values, written
// out rather than taken from x/sys/unix: the log comes from an x86-64 host
// whatever this binary was built for.

// openFlags: the names are internal/sysabi's, the project's one table of
// them, with this build's values, so an imported call renders as a live
// one does.
var openFlags = sysabi.OpenFlagValues()

const (
	oCloexec = unix.O_CLOEXEC // openFlags' values, this build's
	// creat(path, mode) is open(path, O_CREAT|O_WRONLY|O_TRUNC, mode).
	creatFlags = unix.O_CREAT | unix.O_WRONLY | unix.O_TRUNC
)

var atFlags = map[string]uint64{
	"AT_SYMLINK_NOFOLLOW": 0x100, "AT_REMOVEDIR": 0x200, "AT_EACCESS": 0x200,
	"AT_SYMLINK_FOLLOW": 0x400, "AT_NO_AUTOMOUNT": 0x800, "AT_EMPTY_PATH": 0x1000,
	"AT_STATX_SYNC_AS_STAT": 0, "AT_STATX_FORCE_SYNC": 0x2000,
	"AT_STATX_DONT_SYNC": 0x4000, "AT_RECURSIVE": 0x8000,
}

var accessModes = map[string]uint64{"F_OK": 0, "X_OK": 1, "W_OK": 2, "R_OK": 4}

var memfdFlags = map[string]uint64{
	"MFD_CLOEXEC": 1, "MFD_ALLOW_SEALING": 2, "MFD_HUGETLB": 4,
	"MFD_NOEXEC_SEAL": 8, "MFD_EXEC": 0x10,
}

// modeBits: the file types are internal/sysabi's table (S_IF* are the same
// on every Linux architecture), beside the set-id and sticky bits.
var modeBits = func() map[string]uint64 {
	m := map[string]uint64{"S_ISUID": 0o4000, "S_ISGID": 0o2000, "S_ISVTX": 0o1000}
	for _, t := range sysabi.FileTypes {
		m[t.Symbol] = uint64(t.Mode)
	}
	return m
}()

// parseBits reads "O_RDWR|O_CLOEXEC", "S_IFCHR|0666", "0x80000" or "0".
// Numbers take C prefixes (0x hex, leading 0 octal). ok is false when a
// name is unknown; v still holds the bits that were understood.
func parseBits(s string, names map[string]uint64) (v uint64, ok bool) {
	ok = s != ""
	for part := range strings.SplitSeq(s, "|") {
		part = strings.TrimSpace(part)
		if b, found := names[part]; found {
			v |= b
			continue
		}
		n, err := strconv.ParseUint(part, 0, 64)
		if err != nil {
			ok = false
			continue
		}
		v |= n
	}
	return v, ok
}

// parseMakedev reads "makedev(0xc3, 0xff)" (newer strace), "makedev(195,
// 255)" or a raw dev_t (-X raw).
func parseMakedev(s string) (*tracer.Dev, bool) {
	inner, found := strings.CutPrefix(s, "makedev(")
	if !found {
		// -X raw prints the dev_t itself.
		v, err := strconv.ParseUint(s, 0, 64)
		if err != nil {
			return nil, false
		}
		ma, mi := decodeDevT(v)
		return &tracer.Dev{Major: ma, Minor: mi}, true
	}
	args, _, ok := splitArgs(inner)
	if !ok || len(args) != 2 {
		return nil, false
	}
	ma, err1 := strconv.ParseUint(args[0], 0, 32)
	mi, err2 := strconv.ParseUint(args[1], 0, 32)
	if err1 != nil || err2 != nil {
		return nil, false
	}
	return &tracer.Dev{Major: uint32(ma), Minor: uint32(mi)}, true
}

// ioctl request encoding (include/uapi/asm-generic/ioctl.h).
var iocDirs = map[string]uint64{"_IOC_NONE": 0, "_IOC_WRITE": 1, "_IOC_READ": 2}

// namedIoctls are the few requests strace names that could plausibly reach
// an NVIDIA fd (tty probes by isatty and friends).
var namedIoctls = map[string]uint32{
	"TCGETS": 0x5401, "TCSETS": 0x5402, "TIOCGPGRP": 0x540F, "TIOCGWINSZ": 0x5413,
	"FIONREAD": 0x541B, "FIONBIO": 0x5421, "FIONCLEX": 0x5450, "FIOCLEX": 0x5451,
	"FIOASYNC": 0x5452,
}

// parseIoctlRequest reads "_IOC(_IOC_READ|_IOC_WRITE, 0x46, 0x2a, 0x20)",
// "_IOWR('F', 0x2a, 0x20)", "0xc020462a", "0x5401 /* TCGETS */" or "TCGETS".
func parseIoctlRequest(s string) (uint32, bool) {
	if i := strings.Index(s, " /*"); i >= 0 {
		s = s[:i]
	}
	if v, ok := namedIoctls[s]; ok {
		return v, true
	}
	if s != "" && s[0] >= '0' && s[0] <= '9' {
		n, err := strconv.ParseUint(s, 0, 32)
		return uint32(n), err == nil
	}
	macro, inner, found := strings.Cut(s, "(")
	if !found {
		return 0, false
	}
	args, _, ok := splitArgs(inner)
	if !ok {
		return 0, false
	}
	var dir uint64
	switch macro {
	case "_IOC":
		if len(args) != 4 {
			return 0, false
		}
		if dir, ok = parseBits(args[0], iocDirs); !ok {
			return 0, false
		}
		args = args[1:]
	case "_IO", "_IOR", "_IOW", "_IOWR":
		dir = map[string]uint64{"_IO": 0, "_IOW": 1, "_IOR": 2, "_IOWR": 3}[macro]
		if macro == "_IO" {
			args = append(args, "0")
		}
		if len(args) != 3 {
			return 0, false
		}
	default:
		return 0, false
	}
	typ, ok1 := iocNumber(args[0])
	nr, ok2 := iocNumber(args[1])
	size, ok3 := iocNumber(args[2])
	if !ok1 || !ok2 || !ok3 || typ > 0xff || nr > 0xff || size > 0x3fff || dir > 3 {
		return 0, false
	}
	return uint32(dir<<30 | size<<16 | typ<<8 | nr), true
}

// iocNumber reads 0x46, 70 or 'F'.
func iocNumber(s string) (uint64, bool) {
	if len(s) == 3 && s[0] == '\'' && s[2] == '\'' {
		return uint64(s[1]), true
	}
	n, err := strconv.ParseUint(s, 0, 64)
	return n, err == nil
}

// Errno names the kernel uses internally; strace prints them when a
// syscall is interrupted, and x/sys/unix does not know them.
var kernelErrnos = map[string]syscall.Errno{
	"ERESTARTSYS": 512, "ERESTARTNOINTR": 513, "ERESTARTNOHAND": 514,
	"ENOIOCTLCMD": 515, "ERESTART_RESTARTBLOCK": 516, "EPROBE_DEFER": 517,
	"EOPENSTALE": 518, "ENOPARAM": 519, "EBADHANDLE": 521, "ENOTSYNC": 522,
	"EBADCOOKIE": 523, "ENOTSUPP": 524, "ETOOSMALL": 525, "ESERVERFAULT": 526,
	"EBADTYPE": 527, "EJUKEBOX": 528, "EIOCBQUEUED": 529, "ERECALLCONFLICT": 530,
	// Aliases x/sys/unix names the other way round.
	"EWOULDBLOCK": 11, "EDEADLOCK": 35, "ENOTSUP": 95,
}

var errnoByName = sync.OnceValue(func() map[string]syscall.Errno {
	m := make(map[string]syscall.Errno, 160)
	for e := syscall.Errno(1); e < 4096; e++ {
		if n := unix.ErrnoName(e); n != "" {
			m[n] = e
		}
	}
	for n, e := range kernelErrnos {
		m[n] = e
	}
	return m
})

func errnoNumber(name string) syscall.Errno {
	if len(name) < 2 || name[0] != 'E' {
		return 0
	}
	return errnoByName()[name]
}

func signalNumber(name string) int {
	if !strings.HasPrefix(name, "SIG") {
		return 0
	}
	return int(unix.SignalNum(name))
}
