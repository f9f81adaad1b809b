package ptrace

import (
	"bytes"
	"encoding/binary"
	"unsafe"

	"golang.org/x/sys/unix"
)

// maxPath bounds every string read from tracee memory (PATH_MAX).
const maxPath = 4096

const pageSize = 4096

// readMem copies len(buf) bytes at addr in tid's address space, all or
// nothing: a short read reports false, as a kernel probe read would.
func readMem(tid int, addr uint64, buf []byte) bool {
	if addr == 0 || len(buf) == 0 {
		return false
	}
	// Raw, with the iovecs on the stack: this runs on most stops.
	local := unix.Iovec{Base: &buf[0], Len: uint64(len(buf))}
	remote := unix.RemoteIovec{Base: uintptr(addr), Len: len(buf)}
	n, _, e := unix.RawSyscall6(unix.SYS_PROCESS_VM_READV, uintptr(tid),
		uintptr(unsafe.Pointer(&local)), 1, uintptr(unsafe.Pointer(&remote)), 1, 0)
	if e == 0 && int(n) == len(buf) {
		return true
	}
	if e == unix.ENOSYS || e == unix.EPERM {
		return peekMem(tid, addr, buf)
	}
	return false
}

// peekMem is the slow path for kernels or sandboxes without
// process_vm_readv: one word per PTRACE_PEEKDATA.
func peekMem(tid int, addr uint64, buf []byte) bool {
	n, err := unix.PtracePeekData(tid, uintptr(addr), buf)
	return err == nil && n == len(buf)
}

// firstChunk is the first read of a string: most paths are shorter, and
// copying (and zeroing) a whole page for each would cost more than the rare
// second read.
const firstChunk = 256

// readString reads a NUL-terminated string of at most maxPath bytes, never
// across a page boundary in one read, so that a string ending just before
// an unmapped page still reads.
func readString(tid int, addr uint64) (string, bool) {
	if addr == 0 {
		return "", false
	}
	var first [firstChunk]byte
	n := min(firstChunk, pageSize-int(addr%pageSize))
	if !readMem(tid, addr, first[:n]) {
		return "", false
	}
	if i := bytes.IndexByte(first[:n], 0); i >= 0 {
		return string(first[:i]), true
	}
	out := append([]byte(nil), first[:n]...)
	addr += uint64(n)
	var chunk [pageSize]byte
	for len(out) < maxPath {
		n := min(pageSize-int(addr%pageSize), maxPath-len(out))
		if !readMem(tid, addr, chunk[:n]) {
			return string(out), true
		}
		if i := bytes.IndexByte(chunk[:n], 0); i >= 0 {
			return string(append(out, chunk[:i]...)), true
		}
		out = append(out, chunk[:n]...)
		addr += uint64(n)
	}
	return string(out), true
}

// readArgv reads up to max strings from a NULL-terminated pointer array.
func readArgv(tid int, addr uint64, max int) []string {
	var argv []string
	var buf [8]byte // the supported architectures are 64-bit
	for i := 0; i < max; i++ {
		if !readMem(tid, addr+uint64(i)*8, buf[:]) {
			break
		}
		p := binary.NativeEndian.Uint64(buf[:])
		if p == 0 {
			break
		}
		s, _ := readString(tid, p)
		argv = append(argv, s)
	}
	return argv
}
