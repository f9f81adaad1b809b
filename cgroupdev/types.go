// Package cgroupdev answers "does the cgroup device policy allow this access
// to this device?" for cgroup v1 (devices.list) and cgroup v2
// (BPF_CGROUP_DEVICE programs, emulated in user space so that a recorded
// report can be re-judged offline).
//
// Everything here is pure: the programs come from the snapshot
// (snapshot.QueryDevicePrograms reads them from the kernel).
package cgroupdev

import "strings"

// Access is a set of device access bits, with the kernel's
// BPF_DEVCG_ACC_* / DEVCG_ACC_* values.
type Access uint8

const (
	AccessMknod Access = 1
	AccessRead  Access = 2
	AccessWrite Access = 4

	// AccessAll is rwm.
	AccessAll = AccessMknod | AccessRead | AccessWrite
)

// String renders the set the way devices.list does ("rwm" order), or "" for
// the empty set.
func (a Access) String() string {
	var b strings.Builder
	if a&AccessRead != 0 {
		b.WriteByte('r')
	}
	if a&AccessWrite != 0 {
		b.WriteByte('w')
	}
	if a&AccessMknod != 0 {
		b.WriteByte('m')
	}
	if rest := a &^ AccessAll; rest != 0 {
		b.WriteString("?")
	}
	return b.String()
}

// DevType is the device type, with the kernel's BPF_DEVCG_DEV_* values.
type DevType uint8

const (
	TypeBlock DevType = 1
	TypeChar  DevType = 2
	// TypeAll ("a") exists only in cgroup v1 rules and decoded rules that do
	// not test the type.
	TypeAll DevType = 4
)

// String is "b", "c", "a", or "?" for anything else.
func (t DevType) String() string {
	switch t {
	case TypeBlock:
		return "b"
	case TypeChar:
		return "c"
	case TypeAll:
		return "a"
	}
	return "?"
}

// Request is one access the kernel checks: a device and the access wanted.
type Request struct {
	Type         DevType
	Major, Minor uint32
	Access       Access
}

// accessType is the value the kernel puts in bpf_cgroup_dev_ctx.access_type.
func (r Request) accessType() uint32 { return uint32(r.Access)<<16 | uint32(r.Type) }

// Open flag bits used by AccessForOpen (Linux values; the same on every
// architecture Go supports except O_PATH, which is 0o10000000 on x86, arm64
// and riscv).
const (
	oAccMode = 0o3
	oWronly  = 0o1
	oRdwr    = 0o2
	oTrunc   = 0o1000
	oPath    = 0o10000000
)

// AccessForOpen is the access an open(2) of a device node with flags is
// checked for by may_open (for block devices see also OpenChecks). It mirrors the kernel: build_open_flags maps O_ACCMODE through
// ACC_MODE (so the invalid mode 3 means read+write) and adds write for
// O_TRUNC; devcgroup_inode_permission turns MAY_READ/MAY_WRITE into r/w.
// O_PATH opens skip may_open entirely, so they are not checked: 0.
func AccessForOpen(flags uint64) Access {
	if flags&oPath != 0 {
		return 0
	}
	var a Access
	switch flags & oAccMode {
	case 0:
		a = AccessRead
	case oWronly:
		a = AccessWrite
	default: // O_RDWR, and 3 which ACC_MODE also maps to read+write
		a = AccessRead | AccessWrite
	}
	if flags&oTrunc != 0 {
		a |= AccessWrite
	}
	return a
}

// OpenChecks lists every device cgroup check an open(2) of a node of type
// typ with flags goes through; the open is refused if any one is denied.
// Every open is checked by may_open (AccessForOpen). Block devices are
// checked a second time by blkdev_open (bdev_permission), with the access
// of the file's mode: O_TRUNC adds nothing there, and O_ACCMODE 3, which
// opens with neither FMODE_READ nor FMODE_WRITE, is checked with access 0.
// O_PATH opens are not checked at all: nil.
func OpenChecks(typ DevType, flags uint64) []Access {
	if flags&oPath != 0 {
		return nil
	}
	checks := []Access{AccessForOpen(flags)}
	if typ == TypeBlock {
		var a Access
		switch flags & oAccMode {
		case 0:
			a = AccessRead
		case oWronly:
			a = AccessWrite
		case oRdwr:
			a = AccessRead | AccessWrite
		}
		checks = append(checks, a)
	}
	return checks
}
