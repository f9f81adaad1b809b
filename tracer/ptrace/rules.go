package ptrace

import (
	"encoding/binary"
	"slices"
	"strconv"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/cudatrace/cudatrace/nvdev/nvfile"
	"github.com/cudatrace/cudatrace/tracer"
)

// The rules below mirror the eBPF backend's in-kernel filter, so that both
// backends emit the same events for the same target. Paths are matched as
// the target passed them (not resolved), as the kernel filter sees them.

// The path rules are tracer.IsDevicePath, IsInterestingOpen and
// IsInterestingStat, shared with the other backends.
var (
	isDevicePath      = tracer.IsDevicePath
	isInterestingOpen = tracer.IsInterestingOpen
	isInterestingStat = tracer.IsInterestingStat
)

// The layouts of this arch's struct stat and of struct statx, from x/sys.
const (
	statSize        = unsafe.Sizeof(unix.Stat_t{})
	statModeOff     = unsafe.Offsetof(unix.Stat_t{}.Mode)
	statRdevOff     = unsafe.Offsetof(unix.Stat_t{}.Rdev)
	statxModeOff    = unsafe.Offsetof(unix.Statx_t{}.Mode)
	statxRdevMajOff = unsafe.Offsetof(unix.Statx_t{}.Rdev_major)
	statxRdevMinOff = unsafe.Offsetof(unix.Statx_t{}.Rdev_minor)
	statxSize       = statxRdevMinOff + 4 // read no further than the fields used
)

// call is a traced syscall seen at entry whose exit must be seen too. Each
// task reuses one (a sink copies what it keeps), so the event's Dev and Arg
// point into it.
type call struct {
	id   sysID
	nr   uint64 // the syscall's number, as the entry stop gave it
	args [6]uint64
	ev   tracer.Event // filled at entry, completed at exit
	// open: whether the path alone qualifies; otherwise the new fd must be
	// an NVIDIA character device.
	pathMatched bool
	// file (open, fileOK): the opened file's st_dev and st_ino.
	file   [2]uint64
	fileOK bool
	dev    tracer.Dev
	arg    [64]byte
	status tracer.ParamWord
}

// setDev points the event at d, kept in c.
func (c *call) setDev(d tracer.Dev) {
	c.dev = d
	c.ev.Dev = &c.dev
}

// rules decides which calls become events.
type rules struct {
	majors map[uint32]bool
	// pathDevs are character devices opened through an NVIDIA path whose
	// major is another driver's (a stale node): their ioctls count too.
	pathDevs map[tracer.Dev]bool
	// statusOff: where a request's params keep the driver's own result
	// (tracer.Spec.InbandStatus), read into Event.Status as eBPF does.
	statusOff map[uint32]uint32
}

// maxPathDevs bounds pathDevs, as the BPF map path_devs is bounded.
const maxPathDevs = 256

func newRules(majors []uint32, inband []tracer.StatusWord) rules {
	r := rules{majors: make(map[uint32]bool, len(majors)), pathDevs: map[tracer.Dev]bool{},
		statusOff: make(map[uint32]uint32, len(inband))}
	for _, m := range majors {
		r.majors[m] = true
	}
	for _, w := range inband {
		r.statusOff[w.Request] = w.Off
	}
	return r
}

const creatFlags = unix.O_CREAT | unix.O_WRONLY | unix.O_TRUNC

// entry inspects a traced syscall at its entry stop and fills c, the call
// to complete at the exit stop; false means it will not be recorded. fdDir
// is tid's /proc/TID/fd directory (task.fds).
func (r *rules) entry(c *call, tid, fdDir int, id sysID, a [6]uint64) bool {
	*c = call{id: id, args: a}
	e := &c.ev
	e.Syscall = id.String()
	str := func(i int) string { s, _ := readString(tid, a[i]); return s }
	switch id {
	case sysOpen, sysCreat, sysOpenat, sysOpenat2:
		e.Kind = tracer.KindOpen
		switch id {
		case sysOpen:
			e.Path, e.Flags, e.Mode = str(0), a[1], uint32(a[2])
		case sysCreat:
			e.Path, e.Flags, e.Mode = str(0), creatFlags, uint32(a[1])
		case sysOpenat:
			e.Path, e.Flags, e.Mode = str(1), a[2], uint32(a[3])
		case sysOpenat2:
			e.Path = str(1)
			var how [16]byte // struct open_how: u64 flags, u64 mode, u64 resolve
			if readMem(tid, a[2], how[:]) {
				e.Flags = binary.NativeEndian.Uint64(how[0:])
				e.Mode = uint32(binary.NativeEndian.Uint64(how[8:]))
			}
		}
		// Any open may return an NVIDIA fd (a symlink, a relative path),
		// so every open is seen to its exit.
		c.pathMatched = isInterestingOpen(e.Path)
		return true
	case sysIoctl:
		fd := int32(a[0])
		e.Kind, e.FD, e.Request = tracer.KindIoctl, int(fd), uint32(a[1])
		if fd >= 0 {
			dev, ok := r.nvidiaFD(fdDir, int(fd))
			if !ok {
				return false
			}
			c.setDev(dev)
		}
		return true
	case sysStat, sysLstat, sysNewfstatat, sysStatx:
		e.Kind = tracer.KindStat
		switch id {
		case sysStat, sysLstat:
			e.Path = str(0)
		case sysNewfstatat:
			e.Path, e.Flags = str(1), a[3]
		case sysStatx:
			e.Path, e.Flags = str(1), a[2]
		}
		return isInterestingStat(e.Path)
	case sysAccess, sysFaccessat, sysFaccessat2:
		e.Kind = tracer.KindAccess
		switch id {
		case sysAccess:
			e.Path, e.Flags = str(0), a[1]
		case sysFaccessat:
			e.Path, e.Flags = str(1), a[2]
		case sysFaccessat2:
			e.Path, e.Flags = str(1), a[2] // the mode only, as the kernel filter records
		}
		return isInterestingStat(e.Path)
	case sysMknod, sysMknodat:
		e.Kind = tracer.KindMknod
		var dev uint64
		if id == sysMknod {
			e.Path, e.Mode, dev = str(0), uint32(a[1]), a[2]
		} else {
			e.Path, e.Mode, dev = str(1), uint32(a[2]), a[3]
		}
		if isDevMode(e.Mode) {
			c.setDev(kernelDev(uint32(dev)))
		}
	case sysUnlink:
		e.Kind, e.Path = tracer.KindUnlink, str(0)
	case sysUnlinkat:
		e.Kind, e.Path, e.Flags = tracer.KindUnlink, str(1), a[2]
	case sysSymlink:
		e.Kind, e.Target, e.Path = tracer.KindSymlink, str(0), str(1)
	case sysSymlinkat:
		e.Kind, e.Target, e.Path = tracer.KindSymlink, str(0), str(2)
	case sysMkdir:
		e.Kind, e.Path, e.Mode = tracer.KindMkdir, str(0), uint32(a[1])
	case sysMkdirat:
		e.Kind, e.Path, e.Mode = tracer.KindMkdir, str(1), uint32(a[2])
	case sysMemfdCreate:
		e.Kind, e.Path, e.Flags = tracer.KindMemfd, str(0), a[1]
		return true
	case sysExecve:
		e.Kind, e.Path, e.Argv = tracer.KindExec, str(0), readArgv(tid, a[1], 4)
		return true
	case sysExecveat:
		e.Kind, e.Path, e.Argv, e.Flags = tracer.KindExec, str(1), readArgv(tid, a[2], 4), a[4]
		return true
	case sysEventfd, sysEventfd2, sysPipe, sysPipe2, sysSocket, sysSocketpair:
		e.Kind = tracer.KindLimit // kept at the exit only if a limit failed it
		return true
	default:
		return false
	}
	// mknod, unlink, symlink, mkdir: device paths only.
	return isDevicePath(e.Path)
}

// exit completes a call with its return value; nil means not recorded.
func (r *rules) exit(tid, fdDir int, c *call, ret int64) *tracer.Event {
	e := &c.ev
	e.Ret = ret
	a := c.args
	switch c.id {
	case sysEventfd, sysEventfd2, sysPipe, sysPipe2, sysSocket, sysSocketpair:
		if ret >= 0 || !slices.Contains(tracer.LimitErrnos, syscall.Errno(-ret)) {
			return nil
		}
		return e
	case sysOpen, sysCreat, sysOpenat, sysOpenat2:
		if ret >= 0 {
			st, ok := fdStat(fdDir, int(ret))
			c.file, c.fileOK = [2]uint64{st.Dev, st.Ino}, ok
			if ok && isDevMode(st.Mode) {
				c.setDev(tracer.Dev{Major: unix.Major(st.Rdev), Minor: unix.Minor(st.Rdev)})
				if st.Mode&unix.S_IFMT == unix.S_IFCHR && r.majors[c.dev.Major] {
					c.pathMatched = true
				} else if st.Mode&unix.S_IFMT == unix.S_IFCHR && nvfile.IsNode(e.Path) && len(r.pathDevs) < maxPathDevs {
					r.pathDevs[c.dev] = true
				}
			}
		}
		if !c.pathMatched {
			return nil
		}
	case sysIoctl:
		e.Arg = ioctlArg(tid, a[2], &c.arg)
		if off, ok := r.statusOff[e.Request]; ok && !e.Failed() && statusWord(tid, a[2], off, e.Arg, &c.status) {
			e.Status = &c.status
		}
	case sysStat, sysLstat, sysNewfstatat:
		buf := a[1]
		if c.id == sysNewfstatat {
			buf = a[2]
		}
		if ret == 0 {
			var st [statSize]byte
			if readMem(tid, buf, st[:]) {
				e.Mode = binary.NativeEndian.Uint32(st[statModeOff:])
				if isDevMode(e.Mode) {
					c.setDev(userDev(binary.NativeEndian.Uint64(st[statRdevOff:])))
				}
			}
		}
	case sysStatx:
		if ret == 0 {
			var stx [statxSize]byte
			if readMem(tid, a[4], stx[:]) {
				e.Mode = uint32(binary.NativeEndian.Uint16(stx[statxModeOff:]))
				if isDevMode(e.Mode) {
					c.setDev(tracer.Dev{
						Major: binary.NativeEndian.Uint32(stx[statxRdevMajOff:]),
						Minor: binary.NativeEndian.Uint32(stx[statxRdevMinOff:]),
					})
				}
			}
		}
	}
	return e
}

// unreturned completes a call that never returned to the program (rolled
// back for SIGSYS by a seccomp filter, or its thread killed inside it):
// no result and no params are read. An open is kept only when its path
// alone qualifies; there is no fd to look at.
func (r *rules) unreturned(c *call) *tracer.Event {
	switch c.id {
	case sysOpen, sysCreat, sysOpenat, sysOpenat2:
		if !c.pathMatched {
			return nil
		}
	case sysExecve, sysExecveat:
		return nil // an exec that did not finish: reported by the exit
	case sysEventfd, sysEventfd2, sysPipe, sysPipe2, sysSocket, sysSocketpair:
		return nil // no result, so no limit failed it (as under eBPF)
	}
	e := &c.ev
	e.Ret, e.Arg, e.Status, e.NoReturn = 0, nil, nil, true
	return e
}

func isDevMode(mode uint32) bool {
	t := mode & unix.S_IFMT
	return t == unix.S_IFCHR || t == unix.S_IFBLK
}

// kernelDev decodes the 32-bit dev_t mknod takes (new_decode_dev).
func kernelDev(dev uint32) tracer.Dev {
	return tracer.Dev{Major: (dev & 0xfff00) >> 8, Minor: (dev & 0xff) | ((dev >> 12) & 0xfff00)}
}

// userDev decodes the 64-bit dev_t of struct stat (glibc's encoding).
func userDev(dev uint64) tracer.Dev {
	return tracer.Dev{
		Major: uint32(((dev >> 8) & 0xfff) | ((dev >> 32) &^ 0xfff)),
		Minor: uint32((dev & 0xff) | ((dev >> 12) &^ 0xff)),
	}
}

// ioctlArg reads the leading bytes of the params block after the call,
// where NVIDIA's status field says why a call failed: 64 bytes, or 16 when
// 64 would cross into unmapped memory (as the kernel filter does). Small
// values (< 4096) are not pointers.
func ioctlArg(tid int, ptr uint64, buf *[64]byte) []byte {
	if ptr < 4096 {
		return nil
	}
	for _, n := range [...]int{64, 16} {
		if readMem(tid, ptr, buf[:n]) {
			return buf[:n]
		}
	}
	return nil
}

// statusWord reads the u32 at off in the params block at ptr: from arg, the
// leading bytes already read, or else from the tracee (a status past them).
func statusWord(tid int, ptr uint64, off uint32, arg []byte, w *tracer.ParamWord) bool {
	if ptr < 4096 {
		return false
	}
	*w = tracer.ParamWord{Off: off}
	if int(off)+4 <= len(arg) {
		w.Value = binary.NativeEndian.Uint32(arg[off:])
		return true
	}
	var b [4]byte
	if !readMem(tid, ptr+uint64(off), b[:]) {
		return false
	}
	w.Value = binary.NativeEndian.Uint32(b[:])
	return true
}

// fdStat stats what a tracee's fd refers to, through its /proc/TID/fd
// directory (the fd table may be private to the thread, so TID, not PID).
//
// Not cached: close is not traced (a stop per close would cost more than
// the stat saves), so a cached fd could have been closed and its number
// reused by a socket or pipe since; the ioctl would then be pinned on the
// wrong file, or an NVIDIA one missed.
func fdStat(fdDir, fd int) (unix.Stat_t, bool) {
	var st unix.Stat_t
	if fdDir < 0 || fd < 0 {
		return st, false
	}
	// The name on the stack and a raw syscall: this runs on every ioctl.
	var name [12]byte
	strconv.AppendInt(name[:0], int64(fd), 10)
	// statx AT_STATX_DONT_SYNC answers from the cached attributes. A plain
	// stat of a FUSE file asks its server, which the target can run
	// itself, stopped for this very tracer: the tracer would wait forever.
	// An open file's type and device number do not change, so the cache
	// is right.
	var stx unix.Statx_t
	_, _, e := unix.RawSyscall6(unix.SYS_STATX, uintptr(fdDir), uintptr(unsafe.Pointer(&name[0])),
		unix.AT_STATX_DONT_SYNC, unix.STATX_TYPE|unix.STATX_MODE|unix.STATX_INO, uintptr(unsafe.Pointer(&stx)), 0)
	if e == unix.ENOSYS { // before Linux 4.11
		_, _, e = unix.RawSyscall6(unix.SYS_NEWFSTATAT, uintptr(fdDir), uintptr(unsafe.Pointer(&name[0])), uintptr(unsafe.Pointer(&st)), 0, 0, 0)
		return st, e == 0
	}
	st.Mode = uint32(stx.Mode)
	st.Rdev = unix.Mkdev(stx.Rdev_major, stx.Rdev_minor)
	st.Dev, st.Ino = unix.Mkdev(stx.Dev_major, stx.Dev_minor), stx.Ino
	return st, e == 0
}

// nvidiaFD reports whether fd is a character device with an NVIDIA major.
func (r *rules) nvidiaFD(fdDir, fd int) (tracer.Dev, bool) {
	st, ok := fdStat(fdDir, fd)
	if !ok || st.Mode&unix.S_IFMT != unix.S_IFCHR {
		return tracer.Dev{}, false
	}
	d := tracer.Dev{Major: unix.Major(st.Rdev), Minor: unix.Minor(st.Rdev)}
	return d, r.majors[d.Major] || r.pathDevs[d]
}
