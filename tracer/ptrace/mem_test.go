package ptrace

import (
	"os"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// readString reads this process's own memory here (process_vm_readv on
// ourselves needs no privilege).
func TestReadString(t *testing.T) {
	pid := os.Getpid()
	// Two pages, the second unmapped: a string that ends just before the
	// hole reads; one that runs into it reads as far as it goes.
	mem, err := unix.Mmap(-1, 0, 2*pageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	if err := unix.Mprotect(mem[pageSize:], unix.PROT_NONE); err != nil {
		t.Fatal(err)
	}
	page := mem[:pageSize]
	addr := func(off int) uint64 { return uint64(uintptr(unsafe.Pointer(&page[off]))) }
	put := func(off int, s string) { copy(page[off:], s+"\x00") }

	long := "/dev/" + strings.Repeat("nvidia", 100) // past the first 256-byte read
	put(0, long)
	if s, ok := readString(pid, addr(0)); !ok || s != long {
		t.Errorf("long string: %v %q", ok, s)
	}
	short := "/dev/nvidiactl"
	put(pageSize-len(short)-1, short) // its NUL is the page's last byte
	if s, ok := readString(pid, addr(pageSize-len(short)-1)); !ok || s != short {
		t.Errorf("string at the end of the page: %v %q", ok, s)
	}
	copy(page[pageSize-8:], "/dev/nvi") // no NUL before the hole
	if s, ok := readString(pid, addr(pageSize-8)); !ok || s != "/dev/nvi" {
		t.Errorf("string cut by the hole: %v %q", ok, s)
	}
	if s, ok := readString(pid, 0); ok || s != "" {
		t.Errorf("NULL: %v %q", ok, s)
	}
}
