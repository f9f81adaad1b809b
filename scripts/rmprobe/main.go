// Command rmprobe makes real, harmless requests to the NVIDIA kernel driver
// that fail inside the driver (ioctl returns 0, the params carry the
// NV_STATUS), so a traced run records real in-band failures:
//
//  1. NV_ESC_CHECK_VERSION_STR with a wrong version string (the driver
//     refuses it and answers with its own), then with the driver's own;
//  2. NV_ESC_RM_ALLOC of a root client (NV01_ROOT_CLIENT);
//  3. NV_ESC_RM_ALLOC of an object with a class that does not exist;
//  4. NV_ESC_RM_CONTROL with a control command that does not exist;
//  5. NV_ESC_RM_FREE of the client (frees everything under it).
//
// It opens only /dev/nvidiactl, touches no GPU and allocates nothing but
// the client, which it frees (closing the fd would free it too). It prints
// one line per request with what the driver answered, which the replay test
// (analysis/gpureplay_test.go) compares with what the tracer decoded.
//
// Build static: CGO_ENABLED=0 go build -o bin/rmprobe ./scripts/rmprobe
package main

import (
	"encoding/binary"
	"fmt"
	"os"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Numbers from nvidia-abi.json (open-gpu-kernel-modules nv-ioctl-numbers.h,
// nvos.h, nv-ioctl.h); the layouts are those of driver >= 535.43.02.
const (
	escRMFree          = 0x29
	escRMControl       = 0x2a
	escRMAlloc         = 0x2b
	escCheckVersionStr = 0xd2

	classRootClient = 0x41   // NV01_ROOT_CLIENT
	badClass        = 0xdead // no such class in any open-gpu-kernel-modules header
	badControl      = 0xffff // NV0000 category 0xff index 0xff: no such command
	badHandle       = 0xcafe0001
)

// iowr is _IOWR('F', nr, size).
func iowr(nr, size uintptr) uintptr { return 3<<30 | size<<16 | 'F'<<8 | nr }

func ioctl(fd int, req uintptr, buf []byte) error {
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), req, uintptr(unsafe.Pointer(&buf[0])))
	if errno != 0 {
		return errno
	}
	return nil
}

var le = binary.LittleEndian

func main() {
	ver, err := driverVersion()
	if err != nil {
		fail("driver version: %v", err)
	}
	if !atLeast(ver, 535, 43, 2) {
		fail("driver %s: rmprobe uses the params layouts of 535.43.02 and later", ver)
	}
	fd, err := unix.Open("/dev/nvidiactl", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		fail("open /dev/nvidiactl: %v", err)
	}
	defer func() { _ = unix.Close(fd) }() // read-only: a failed close loses nothing

	// 1. nv_ioctl_rm_api_version_t {cmd @0, reply @4, versionString[64] @8}.
	v := make([]byte, 72)
	copy(v[8:], "0.0.0")
	err = ioctl(fd, iowr(escCheckVersionStr, 72), v)
	fmt.Printf("check_version_str wrong=%q err=%v reply=%d driver=%q\n", "0.0.0", errName(err), le.Uint32(v[4:]), cstr(v[8:]))
	v = make([]byte, 72)
	copy(v[8:], ver)
	err = ioctl(fd, iowr(escCheckVersionStr, 72), v)
	fmt.Printf("check_version_str right=%q err=%v reply=%d\n", ver, errName(err), le.Uint32(v[4:]))

	// 2. NVOS64 (48): hRoot @0, hObjectParent @4, hObjectNew @8, hClass @12, ..., status @40.
	a := make([]byte, 48)
	le.PutUint32(a[12:], classRootClient)
	err = ioctl(fd, iowr(escRMAlloc, 48), a)
	client := le.Uint32(a[8:])
	fmt.Printf("rm_alloc class=%#x err=%v status=%#x handle=%#x\n", classRootClient, errName(err), le.Uint32(a[40:]), client)
	if err != nil || le.Uint32(a[40:]) != 0 || client == 0 {
		fail("no root client: the other requests need one")
	}

	// 3. An object of a class that does not exist, under the client.
	a = make([]byte, 48)
	le.PutUint32(a[0:], client)
	le.PutUint32(a[4:], client)
	le.PutUint32(a[8:], badHandle)
	le.PutUint32(a[12:], badClass)
	err = ioctl(fd, iowr(escRMAlloc, 48), a)
	fmt.Printf("rm_alloc class=%#x err=%v status=%#x\n", badClass, errName(err), le.Uint32(a[40:]))

	// 4. NVOS54 (32): hClient @0, hObject @4, cmd @8, flags @12, params @16, paramsSize @24, status @28.
	c := make([]byte, 32)
	le.PutUint32(c[0:], client)
	le.PutUint32(c[4:], client)
	le.PutUint32(c[8:], badControl)
	err = ioctl(fd, iowr(escRMControl, 32), c)
	fmt.Printf("rm_control cmd=%#x err=%v status=%#x\n", badControl, errName(err), le.Uint32(c[28:]))

	// 5. NVOS00 (16): hRoot @0, hObjectParent @4, hObjectOld @8, status @12.
	f := make([]byte, 16)
	le.PutUint32(f[0:], client)
	le.PutUint32(f[8:], client)
	err = ioctl(fd, iowr(escRMFree, 16), f)
	fmt.Printf("rm_free handle=%#x err=%v status=%#x\n", client, errName(err), le.Uint32(f[12:]))
}

func errName(err error) string {
	if err == nil {
		return "0"
	}
	if e, ok := err.(unix.Errno); ok {
		return unix.ErrnoName(e)
	}
	return err.Error()
}

func cstr(b []byte) string {
	if i := strings.IndexByte(string(b), 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// driverVersion reads the kernel module's version from
// /proc/driver/nvidia/version ("... Kernel Module for x86_64  580.159.04  ...").
func driverVersion() (string, error) {
	b, err := os.ReadFile("/proc/driver/nvidia/version")
	if err != nil {
		return "", err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	for _, f := range strings.Fields(line) {
		if p := strings.Split(f, "."); len(p) >= 2 {
			if _, err := strconv.Atoi(p[0]); err == nil {
				return f, nil
			}
		}
	}
	return "", fmt.Errorf("no version in %q", line)
}

func atLeast(v string, want ...int) bool {
	p := strings.Split(v, ".")
	for i, w := range want {
		n := 0
		if i < len(p) {
			n, _ = strconv.Atoi(p[i])
		}
		if n != w {
			return n > w
		}
	}
	return true
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "rmprobe: "+format+"\n", args...)
	os.Exit(1)
}
