package main

import (
	"bytes"
	"debug/elf"
	"os"
	"path/filepath"
	"testing"
)

// The written library is what cudatrace probes in a real libcuda: an ELF
// shared object whose .dynsym exports cuInit as a function in an
// executable segment; called, it returns what fakecuda passes it, and
// opening it leaves nothing behind.
func TestFakeLibcuda(t *testing.T) {
	image, off := fakeLibcuda()
	f, err := elf.NewFile(bytes.NewReader(image))
	if err != nil {
		t.Fatal(err)
	}
	if f.Type != elf.ET_DYN || f.Machine != elf.EM_X86_64 {
		t.Errorf("type %v machine %v", f.Type, f.Machine)
	}
	syms, err := f.DynamicSymbols()
	if err != nil || len(syms) != 1 || syms[0].Name != "cuInit" || elf.ST_TYPE(syms[0].Info) != elf.STT_FUNC || syms[0].Value != off {
		t.Fatalf("dynamic symbols %+v (%v), want cuInit at %#x", syms, err, off)
	}
	exec := false
	for _, p := range f.Progs {
		exec = exec || p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 && p.Vaddr <= off && off < p.Vaddr+p.Memsz
	}
	if !exec {
		t.Error("cuInit is in no executable PT_LOAD segment")
	}
	if !canCallLib {
		t.Skip("calling it needs amd64")
	}
	dir := t.TempDir()
	lib, err := loadFakeLibcuda(&sequence{}, dir)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(lib.path) != "libcuda.so.1" {
		t.Errorf("written as %s: cudatrace recognises libcuda.so* by name", lib.path)
	}
	for _, code := range []int{0, 100, 999, 304} {
		if got := lib.call(code); got != code {
			t.Errorf("cuInit(%d) returned %d", code, got)
		}
	}
	lib.unload()
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("left behind: %v", left)
	}
}
