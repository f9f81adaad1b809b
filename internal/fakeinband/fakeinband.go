// Package fakeinband is a target's workload for the tests of in-band
// results: successful ioctls on /dev/urandom's driver (c 1:9, under a
// /dev/nvidia name) whose params carry a status word the test controls,
// listed for the tracer as an NVIDIA request's would be
// (tracer.Spec.InbandStatus).
package fakeinband

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/cudatrace/cudatrace/tracer"
)

const (
	// RndGetEntCnt (_IOR('R', 0x00, int)) writes its int at 0 and leaves
	// the status word at 4 alone.
	RndGetEntCnt = 0x80045200
	// FIOCLEX (asm-generic/ioctls.h, x86 and arm64 alike) is answered by
	// the VFS, which ignores its argument; its word lies at 100, past the
	// bytes of params a tracer copies.
	FIOCLEX = 0x5451

	Calls   = 20   // per request
	FailAt  = 14   // the 15th call's word is Failure; the others' 0
	Failure = 0x22 // NV_ERR_INVALID_CLASS
)

// Node makes the device node the workload runs on, removed when t ends.
func Node(t testing.TB) string {
	t.Helper()
	p := fmt.Sprintf("/dev/nvidia-inband-cudatrace-test-%08x", rand.Uint32())
	if err := unix.Mknod(p, unix.S_IFCHR|0o666, int(unix.Mkdev(1, 9))); err != nil {
		t.Fatalf("mknod %s: %v", p, err)
	}
	t.Cleanup(func() { _ = os.Remove(p) }) // a test node: gone already is fine
	return p
}

// Words lists the two requests' status words.
func Words(keepAll bool) []tracer.StatusWord {
	return []tracer.StatusWord{
		{Request: RndGetEntCnt, Off: 4, KeepAll: keepAll},
		{Request: FIOCLEX, Off: 100, KeepAll: keepAll},
	}
}

// Repeat makes Calls successful ioctls of each request on the node at path.
func Repeat(path string) error {
	fd, err := unix.Open(path, unix.O_RDONLY, 0)
	if err != nil {
		return err
	}
	defer func() { _ = unix.Close(fd) }() // read-only use: a failed close loses nothing
	var params [128]byte
	for i := range Calls {
		status := uint32(0)
		if i == FailAt {
			status = Failure
		}
		for _, w := range Words(false) {
			clear(params[:])
			binary.NativeEndian.PutUint32(params[w.Off:], status)
			if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(w.Request), uintptr(unsafe.Pointer(&params[0]))); errno != 0 {
				return fmt.Errorf("ioctl %#x: %w", w.Request, errno)
			}
		}
	}
	return nil
}
