package main

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// With --cuinit-lib, fakecuda returns its result through a cuInit of a
// real shared library, as a CUDA program does: cudatrace's uretprobe on
// that entry point then reports CUDA's own return code, as on a real run.
// The library is the smallest ELF shared object that exports one function:
// cuInit(code) returns code. It is written at run time (no binary in the
// tree), opened as the dynamic loader opens libcuda.so.1, and mapped
// executable; a static binary has no loader, so the call goes through a
// trampoline (fakelib_amd64.s). amd64 only.

// cuInitCode is the library's cuInit: mov eax, edi; ret.
var cuInitCode = []byte{0x89, 0xf8, 0xc3}

const (
	libTextOff = 0x200 // file offset and address of .text
	libName    = "libcuda.so.1"
)

// fakeLibcuda is the ELF image of the library and cuInit's offset in it.
func fakeLibcuda() (image []byte, cuInitOff uint64) {
	dynstr := []byte("\x00cuInit\x00")
	shstr := []byte("\x00.text\x00.dynsym\x00.dynstr\x00.shstrtab\x00")
	// Layout: header, one program header, then .text, .dynsym, .dynstr,
	// .shstrtab, then the section headers.
	const (
		ehdrSize, phdrSize, symSize, shdrSize = 64, 56, 24, 64
	)
	textOff := uint64(libTextOff)
	symOff := textOff + 16
	strOff := symOff + 2*symSize
	shstrOff := strOff + uint64(len(dynstr))
	shOff := (shstrOff + uint64(len(shstr)) + 7) &^ 7
	end := shOff + 5*shdrSize

	var b bytes.Buffer
	le := binary.LittleEndian
	w := func(v any) { _ = binary.Write(&b, le, v) } // a bytes.Buffer does not fail
	w(elf.Header64{
		Ident:     [elf.EI_NIDENT]byte{0x7f, 'E', 'L', 'F', byte(elf.ELFCLASS64), byte(elf.ELFDATA2LSB), byte(elf.EV_CURRENT)},
		Type:      uint16(elf.ET_DYN),
		Machine:   uint16(elf.EM_X86_64),
		Version:   uint32(elf.EV_CURRENT),
		Phoff:     ehdrSize,
		Shoff:     shOff,
		Ehsize:    ehdrSize,
		Phentsize: phdrSize,
		Phnum:     1,
		Shentsize: shdrSize,
		Shnum:     5,
		Shstrndx:  4,
	})
	// One PT_LOAD, readable and executable, mapping the whole file at 0.
	w(elf.Prog64{Type: uint32(elf.PT_LOAD), Flags: uint32(elf.PF_R | elf.PF_X), Off: 0, Vaddr: 0, Paddr: 0,
		Filesz: end, Memsz: end, Align: 0x1000})
	b.Write(make([]byte, int(textOff)-b.Len()))
	b.Write(cuInitCode)
	b.Write(make([]byte, int(symOff)-b.Len()))
	w(elf.Sym64{})
	w(elf.Sym64{Name: 1, Info: elf.ST_INFO(elf.STB_GLOBAL, elf.STT_FUNC), Shndx: 1, Value: textOff, Size: uint64(len(cuInitCode))})
	b.Write(dynstr)
	b.Write(shstr)
	b.Write(make([]byte, int(shOff)-b.Len()))
	w(elf.Section64{})
	w(elf.Section64{Name: 1, Type: uint32(elf.SHT_PROGBITS), Flags: uint64(elf.SHF_ALLOC | elf.SHF_EXECINSTR), Addr: textOff, Off: textOff, Size: uint64(len(cuInitCode)), Addralign: 16})
	w(elf.Section64{Name: 7, Type: uint32(elf.SHT_DYNSYM), Flags: uint64(elf.SHF_ALLOC), Addr: symOff, Off: symOff, Size: 2 * symSize, Link: 3, Info: 1, Addralign: 8, Entsize: symSize})
	w(elf.Section64{Name: 15, Type: uint32(elf.SHT_STRTAB), Flags: uint64(elf.SHF_ALLOC), Addr: strOff, Off: strOff, Size: uint64(len(dynstr)), Addralign: 1})
	w(elf.Section64{Name: 23, Type: uint32(elf.SHT_STRTAB), Off: shstrOff, Size: uint64(len(shstr)), Addralign: 1})
	return b.Bytes(), textOff
}

// loadedLib is the library mapped into this process.
type loadedLib struct {
	path   string
	mapped []byte
	cuInit uintptr
}

// loadFakeLibcuda writes the library under dir, opens it as the loader
// would (O_RDONLY|O_CLOEXEC) and maps it executable.
func loadFakeLibcuda(q *sequence, dir string) (*loadedLib, error) {
	if !canCallLib {
		return nil, fmt.Errorf("--cuinit-lib needs amd64")
	}
	image, off := fakeLibcuda()
	d, err := os.MkdirTemp(dir, "fakecuda-lib-")
	if err != nil {
		return nil, err
	}
	// Written under another name, then renamed: the only open of
	// libcuda.so.1 is the loader's, of the whole file (an open for
	// writing would be probed while still empty).
	// (not libcuda.so*: cudatrace watches opens of those names).
	path, tmp := filepath.Join(d, libName), filepath.Join(d, "image.tmp")
	if err := os.WriteFile(tmp, image, 0o755); err != nil {
		return nil, err
	}
	if err := os.Rename(tmp, path); err != nil {
		return nil, err
	}
	fd, err := q.openat(path, unix.O_RDONLY|unix.O_CLOEXEC)
	if err != nil {
		return nil, &loadError{path: path, err: err}
	}
	defer q.close(fd)
	m, err := unix.Mmap(fd, 0, len(image), unix.PROT_READ|unix.PROT_EXEC, unix.MAP_PRIVATE)
	if err != nil {
		return nil, fmt.Errorf("mmap %s: %v", path, err)
	}
	return &loadedLib{path: path, mapped: m, cuInit: uintptr(unsafePointer(m)) + uintptr(off)}, nil
}

// call returns code through the library's cuInit.
func (l *loadedLib) call(code int) int { return int(int32(callLib1(l.cuInit, uintptr(code)))) }

func (l *loadedLib) unload() {
	_ = unix.Munmap(l.mapped) // the process is about to exit
	_ = os.RemoveAll(filepath.Dir(l.path))
}
