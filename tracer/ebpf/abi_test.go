package ebpf

import (
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The numbers bpf/cudatrace.c writes for the kernel's user ABI are the ones
// golang.org/x/sys/unix has: a typo in the C would misread every statx or
// creat.
func TestCConstantsMatchTheABI(t *testing.T) {
	var stx unix.Statx_t
	for _, c := range []struct {
		name    string
		c, want uintptr
	}{
		{"STX_MODE_OFF", uintptr(bpfStatxLayoutSTX_MODE_OFF), unsafe.Offsetof(stx.Mode)},
		{"STX_RDEV_MAJOR_OFF", uintptr(bpfStatxLayoutSTX_RDEV_MAJOR_OFF), unsafe.Offsetof(stx.Rdev_major)},
		{"STX_RDEV_MINOR_OFF", uintptr(bpfStatxLayoutSTX_RDEV_MINOR_OFF), unsafe.Offsetof(stx.Rdev_minor)},
		{"CREAT_FLAGS", uintptr(bpfOpenFlagsCREAT_FLAGS), unix.O_CREAT | unix.O_WRONLY | unix.O_TRUNC},
		{"ARG_LEN", uintptr(bpfLimitsARG_LEN), unsafe.Sizeof(bpfEvent{}.Arg)},
		{"PATH_LEN", uintptr(bpfLimitsPATH_LEN), unsafe.Sizeof(bpfEvent{}.Path)},
		{"ARGV_MAX*ARGV_SLOT", uintptr(bpfLimitsARGV_MAX * bpfLimitsARGV_SLOT), unsafe.Sizeof(bpfEvent{}.Aux)},
	} {
		if c.c != c.want {
			t.Errorf("%s = %#x in the C, want %#x", c.name, c.c, c.want)
		}
	}
}
