package stracelog

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzParse feeds arbitrary input: Parse must return a Log or an error,
// never panic, and the Log must be consistent.
func FuzzParse(f *testing.F) {
	// Seeds: the NVIDIA part of each recording, and the small logs.
	for _, name := range []string{"cuinit-deny-uvm.strace", "cuinit-deny-195-smi.strace", "cuinit-ok-root.strace"} {
		raw, err := os.ReadFile(filepath.Join(recordings, name))
		if err != nil {
			f.Fatal(err)
		}
		lines := strings.SplitAfter(string(raw), "\n")
		for i := 0; i+20 <= len(lines); i += 150 {
			f.Add([]byte(strings.Join(lines[i:i+20], "")))
		}
		f.Add([]byte(strings.Join(lines[len(lines)-60:], "")))
	}
	for _, s := range []string{
		`[pid   700] 10:00:00.000100 openat(AT_FDCWD, "/dev/nvidia-uvm", O_RDWR|O_CLOEXEC <unfinished ...>
[pid   700] 10:00:00.000200 <... openat resumed>) = 5
[pid   700] 10:00:00.000300 ioctl(5, _IOC(_IOC_NONE, 0, 0x1, 0x3000), 0x7ffd5b542570) = 0
`,
		`execve("/usr/bin/python3", ["python3", "-c", "print(\"a, b)\")"..., "x\\y"], 0x7ffd /* 1 var */) = 0
statx(AT_FDCWD, "/dev/nvidia-uvm", AT_STATX_SYNC_AS_STAT, STATX_ALL, {stx_mode=S_IFCHR|0666, stx_rdev_major=238, stx_rdev_minor=0, ...}) = 0
openat2(AT_FDCWD, "/dev/nvidiactl", {flags=O_RDWR|O_CLOEXEC, resolve=0, mode=0}, 24) = 3
+++ killed by SIGSEGV (core dumped) +++
`,
		`clone(child_stack=NULL, flags=CLONE_CHILD_CLEARTID|SIGCHLDstrace: Process 901 attached
, child_tidptr=0x7fb802387a10) = 901
[pid   901] ioctl(3</dev/nvidia0<char 195:0>>, _IOC(_IOC_READ|_IOC_WRITE, 0x46, 0x2a, 0x20), 0x7ffd) = 0
[pid   901] +++ exited with 0 +++
`,
		"1700000000.000100 mknodat(AT_FDCWD, \"/dev/nvidia-uvm\", S_IFCHR|0666, makedev(0xee, 0)) = 0 <0.000013>\n",
		"     0.000000 dup2(4</dev/nvidiactl<char 195:255>>, 10) = 10</dev/nvidiactl<char 195:255>>\n",
		"\x00\xff(=<\"",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		lg, err := Parse(bytes.NewReader(data))
		if err != nil {
			if !errors.Is(err, ErrNotStrace) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		if lg.Lines < lg.Skipped || lg.Lines > bytes.Count(data, []byte("\n"))+1 {
			t.Fatalf("Lines %d Skipped %d for %d newlines", lg.Lines, lg.Skipped, bytes.Count(data, []byte("\n")))
		}
		for i, e := range lg.Events {
			if e.Seq != uint64(i+1) || e.Kind == "" {
				t.Fatalf("event %d: %+v", i, e)
			}
			if !lg.HasPIDs && (e.PID != 0 || e.TID != 0) {
				t.Fatalf("pid %d without pids in the log", e.PID)
			}
			if !lg.HasTimes && e.Time != 0 {
				t.Fatalf("time %v without times in the log", e.Time)
			}
		}
	})
}

// BenchmarkParse reads the largest recording.
func BenchmarkParse(b *testing.B) {
	raw, err := os.ReadFile(filepath.Join(recordings, "cuinit-ok-root.strace"))
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(bytes.NewReader(raw)); err != nil {
			b.Fatal(err)
		}
	}
}
