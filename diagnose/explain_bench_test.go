package diagnose

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/cudatrace/cudatrace/tracer/stracelog"
)

// manyPIDsLog is a strace -f log in which one process forks n children,
// each of which fails to open nvidiactl and exits.
func manyPIDsLog(n int) []byte {
	var b bytes.Buffer
	b.WriteString("1 execve(\"/usr/bin/python3\", [\"python3\"], 0x7ffd /* 1 var */) = 0\n")
	for i := 2; i < n+2; i++ {
		fmt.Fprintf(&b, "1 clone(child_stack=NULL, flags=CLONE_CHILD_CLEARTID|SIGCHLD, child_tidptr=0x7f) = %d\n", i)
		fmt.Fprintf(&b, "%d openat(AT_FDCWD, \"/dev/nvidiactl\", O_RDWR) = -1 EACCES (Permission denied)\n", i)
		fmt.Fprintf(&b, "%d +++ exited with 1 +++\n", i)
	}
	return b.Bytes()
}

// onePIDLog is a log of one process issuing n NVIDIA ioctls after its opens.
func onePIDLog(n int) []byte {
	var b bytes.Buffer
	b.WriteString("7 execve(\"/usr/bin/python3\", [\"python3\"], 0x7ffd /* 1 var */) = 0\n")
	b.WriteString("7 openat(AT_FDCWD, \"/dev/nvidiactl\", O_RDWR|O_CLOEXEC) = 3</dev/nvidiactl<char 195:255>>\n")
	for i := range n {
		fmt.Fprintf(&b, "7 ioctl(3</dev/nvidiactl<char 195:255>>, _IOC(_IOC_READ|_IOC_WRITE, 0x46, 0x%x, 0x20), 0x7ffd) = 0\n", 0x20+i%16)
	}
	b.WriteString("7 openat(AT_FDCWD, \"/dev/nvidia-uvm\", O_RDWR|O_CLOEXEC) = -1 EPERM (Operation not permitted)\n")
	b.WriteString("7 +++ exited with 1 +++\n")
	return b.Bytes()
}

func benchExplain(b *testing.B, log []byte) {
	b.SetBytes(int64(len(log)))
	b.ReportAllocs()
	for b.Loop() {
		l, err := stracelog.ParseWith(bytes.NewReader(log), StraceLogOptions)
		if err != nil {
			b.Fatal(err)
		}
		if rep := FromStraceLog(l, "bench"); rep.Analysis.Failing == nil {
			b.Fatal("no failing call found")
		}
	}
}

// Time per PID should stay flat as the PIDs grow (a 200k-PID log once took
// 49 s: quadratic); compare the sizes' ns/op over n.
func BenchmarkExplainManyPIDs(b *testing.B) {
	for _, n := range []int{10_000, 20_000, 40_000} {
		log := manyPIDsLog(n)
		b.Run(fmt.Sprint(n), func(b *testing.B) { benchExplain(b, log) })
	}
}

// Memory per op should stay bounded as one process's log grows.
func BenchmarkExplainOnePID(b *testing.B) {
	for _, n := range []int{100_000, 400_000} {
		log := onePIDLog(n)
		b.Run(fmt.Sprint(n), func(b *testing.B) { benchExplain(b, log) })
	}
}
