package snapshot

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// testELF is a shared object with one section: .rodata holding rodata
// after pad bytes (the banner sits 0.6 MB into the real one), or none when
// rodata is nil.
func testELF(rodata []byte, pad int) []byte {
	le := binary.LittleEndian
	var b bytes.Buffer
	w := func(v any) { _ = binary.Write(&b, le, v) } // a bytes.Buffer does not fail
	shstr := []byte("\x00.rodata\x00.shstrtab\x00")
	body := append(make([]byte, pad), rodata...)
	const ehdr, shdr = 64, 64
	bodyOff := uint64(ehdr)
	strOff := bodyOff + uint64(len(body))
	shOff := (strOff + uint64(len(shstr)) + 7) &^ 7
	n := uint16(3)
	if rodata == nil {
		n = 2
	}
	w(elf.Header64{
		Ident: [elf.EI_NIDENT]byte{0x7f, 'E', 'L', 'F', byte(elf.ELFCLASS64), byte(elf.ELFDATA2LSB), byte(elf.EV_CURRENT)},
		Type:  uint16(elf.ET_DYN), Machine: uint16(elf.EM_X86_64), Version: uint32(elf.EV_CURRENT),
		Shoff: shOff, Ehsize: ehdr, Shentsize: shdr, Shnum: n, Shstrndx: n - 1,
	})
	b.Write(body)
	b.Write(shstr)
	b.Write(make([]byte, int(shOff)-b.Len()))
	w(elf.Section64{})
	if rodata != nil {
		w(elf.Section64{Name: 1, Type: uint32(elf.SHT_PROGBITS), Flags: uint64(elf.SHF_ALLOC), Off: bodyOff, Size: uint64(len(body)), Addralign: 1})
	}
	w(elf.Section64{Name: 9, Type: uint32(elf.SHT_STRTAB), Off: strOff, Size: uint64(len(shstr)), Addralign: 1})
	return b.Bytes()
}

// testLdCache is an ld.so.cache (the 2.32 format) mapping each name to
// its path, with this machine's ABI flags.
func testLdCache(entries [][2]string) []byte {
	le := binary.LittleEndian
	const header, entry = 48, 24
	strs := []byte{}
	off := func(s string) uint32 {
		o := uint32(header + entry*len(entries) + len(strs))
		strs = append(strs, s...)
		strs = append(strs, 0)
		return o
	}
	out := make([]byte, header, 4096)
	copy(out, "glibc-ld.so.cache1.1")
	le.PutUint32(out[20:], uint32(len(entries)))
	flags := ldCacheFlags["amd64"]
	if f, ok := ldCacheFlags[runtime.GOARCH]; ok {
		flags = f
	}
	for _, e := range entries {
		var rec [entry]byte
		le.PutUint32(rec[0:], uint32(flags))
		le.PutUint32(rec[4:], off(e[0]))
		le.PutUint32(rec[8:], off(e[1]))
		out = append(out, rec[:]...)
	}
	return append(out, strs...)
}

// The library's own banner says which driver it is, whatever it is named;
// the toolkit's stub is known by its contents; what steered the loader
// (ld.so.cache, the ld.so.conf file) is named; hostile files are refused
// without blocking or being opened.
func TestInspectLibrary(t *testing.T) {
	root := t.TempDir()
	banner := []byte("\x00\x00CUDA driver is a stub library\x00Version 580.95.05. Copyright (C) 2025 NVIDIA Corporation. All rights reserved.\x00")
	write := func(p string, data []byte) {
		t.Helper()
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	link := func(p, dest string) {
		t.Helper()
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(dest, full); err != nil {
			t.Fatal(err)
		}
	}
	// A compat libcuda under a name that says another version: the
	// contents win.
	write("opt/compat/libcuda.so.580.159.04", testELF(banner, 700<<10))
	link("opt/compat/libcuda.so.1", "libcuda.so.580.159.04")
	// The driver's libcuda without a banner: the name its link leads to.
	write("usr/lib/x86_64-linux-gnu/libcuda.so.580.159.04", testELF([]byte("no banner"), 5<<20))
	link("usr/lib/x86_64-linux-gnu/libcuda.so.1", "libcuda.so.580.159.04")
	// The toolkit's stub, copied to libcuda.so.1 outside any stubs dir.
	write("app/lib/libcuda.so.1", testELF(nil, 0))
	write("app/lib/libnvidia-ml.so.1", testELF([]byte("libnvidia-ml.so in GDK package is a stub library that is attached only for build purposes"), 0))
	write("etc/ld.so.cache", testLdCache([][2]string{{"libcuda.so.1", "/usr/lib/x86_64-linux-gnu/libcuda.so.1"}}))
	write("etc/ld.so.conf", []byte("include /etc/ld.so.conf.d/*.conf\n"))
	write("etc/ld.so.conf.d/000_cuda.conf", []byte("/usr/local/cuda/lib64\n"))
	write("etc/ld.so.conf.d/x86_64-linux-gnu.conf", []byte("# Multiarch support\n/usr/lib/x86_64-linux-gnu\n"))
	if err := unix.Mkfifo(filepath.Join(root, "app/lib/libcuda.so"), 0o644); err != nil {
		t.Fatal(err)
	}
	link("app/dev/libcuda.so.1", "/etc") // resolved in the root, a directory
	write("bad/libcuda.so.1", append([]byte("\x7fELF\x02\x01\x01"), bytes.Repeat([]byte{0xff}, 200)...))
	// A section-name table the headers say is 1 GiB long, in a sparse file:
	// not read into memory (the header read has a budget).
	huge := testELF([]byte("x"), 0)
	shoff := binary.LittleEndian.Uint64(huge[0x28:])
	strtab := shoff + 2*64 // the last section header: .shstrtab
	binary.LittleEndian.PutUint64(huge[strtab+32:], 1<<30)
	write("huge/libcuda.so.1", huge)
	if err := os.Truncate(filepath.Join(root, "huge/libcuda.so.1"), 2<<30); err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct {
		path                    string
		resolved, version, from string
		stub, ldCache           bool
		ldConf, err             string
	}{
		{path: "/opt/compat/libcuda.so.1", resolved: "/opt/compat/libcuda.so.580.159.04", version: "580.95.05", from: "contents"},
		{path: "/usr/lib/x86_64-linux-gnu/libcuda.so.1", resolved: "/usr/lib/x86_64-linux-gnu/libcuda.so.580.159.04", version: "580.159.04", from: "name",
			ldCache: true, ldConf: "/etc/ld.so.conf.d/x86_64-linux-gnu.conf"},
		{path: "/app/lib/libcuda.so.1", resolved: "/app/lib/libcuda.so.1", stub: true},
		{path: "/app/lib/libnvidia-ml.so.1", resolved: "/app/lib/libnvidia-ml.so.1", stub: true},
		{path: "/app/lib/libcuda.so", resolved: "/app/lib/libcuda.so", err: "a FIFO"},
		{path: "/app/dev/libcuda.so.1", resolved: "/etc", err: "not a regular file"},
		{path: "/bad/libcuda.so.1", resolved: "/bad/libcuda.so.1"},
		{path: "/huge/libcuda.so.1", resolved: "/huge/libcuda.so.1"},
	} {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		lf, err := inspectLibrary(1, c.path, root, false)
		runtime.ReadMemStats(&after)
		if n := after.TotalAlloc - before.TotalAlloc; n > 64<<20 {
			t.Errorf("%s: %d MB allocated to read it", c.path, n>>20)
		}
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: error %v, want %q", c.path, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.path, err)
			continue
		}
		if lf.Resolved != c.resolved || lf.Version != c.version || lf.VersionFrom != c.from || lf.Stub != c.stub || lf.LdCache != c.ldCache || lf.LdConf != c.ldConf {
			t.Errorf("%s: got %+v, want %+v", c.path, lf, c)
		}
	}
}

// A live process's library is read through its /proc/PID/root, and the
// mount it lives on named when it is not the root's; once the process is
// gone the read fails, unless its root was cudatrace's.
func TestInspectLibraryOfProcess(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "libcuda.so.1")
	if err := os.WriteFile(p, testELF([]byte("Version 575.57.08. Copyright (C) 2025 NVIDIA Corporation."), 0), 0o644); err != nil {
		t.Fatal(err)
	}
	lf := InspectLibrary(os.Getpid(), p, false)
	if lf.Error != "" || lf.Version != "575.57.08" || lf.VersionFrom != "contents" || lf.PID != os.Getpid() {
		t.Errorf("own process: %+v", lf)
	}
	if lf := InspectLibrary(os.Getpid(), "libcuda.so.1", true); lf.Error == "" {
		t.Errorf("a relative path was read (against the root, not the cwd): %+v", lf)
	}
	const gone = 1 << 30 // above pid_max: no such process
	if lf := InspectLibrary(gone, p, false); lf.Error == "" {
		t.Errorf("gone process, other root: read anyway: %+v", lf)
	}
	if lf := InspectLibrary(gone, p, true); lf.Error != "" || lf.Version != "575.57.08" {
		t.Errorf("gone process, same root: %+v", lf)
	}
}
