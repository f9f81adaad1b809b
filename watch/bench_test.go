package watch

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/cudatrace/cudatrace/snapshot"
	"github.com/cudatrace/cudatrace/tracer"
)

// streamBackend feeds n synthetic short processes, concurrent ones at a
// time (each opens nvidiactl and nvidia-uvm, makes ioctls, starts CUDA,
// exits), without building the stream in memory.
type streamBackend struct {
	n, concurrent int
	heapAt        []uint64 // heap in use after each tenth of the run
}

func (s *streamBackend) Name() string { return "ebpf" }

func (s *streamBackend) Run(_ context.Context, _ tracer.Spec, sink tracer.Sink) (*tracer.Result, error) {
	var seq uint64
	emit := func(e tracer.Event) {
		seq++
		e.Seq = seq
		sink.Event(&e)
	}
	for base := 0; base < s.n; base += s.concurrent {
		for step := range 6 {
			for i := range s.concurrent {
				pid := 1000 + (base+i)%4_000_000
				switch step {
				case 0:
					emit(tracer.Event{PID: pid, TID: pid, Comm: "python3", Kind: tracer.KindOpen, Syscall: "openat", Path: "/dev/nvidiactl", Ret: 3, Dev: ctlDev})
				case 1:
					emit(tracer.Event{PID: pid, TID: pid, Comm: "python3", Kind: tracer.KindOpen, Syscall: "openat", Path: "/dev/nvidia-uvm", Ret: 4, Dev: uvmDev})
				case 2, 3:
					emit(tracer.Event{PID: pid, TID: pid, Comm: "python3", Kind: tracer.KindIoctl, Syscall: "ioctl", FD: 3, Dev: ctlDev, Request: 0xc020462a, Ret: 0, Arg: make([]byte, 32)})
				case 4:
					emit(tracer.Event{PID: pid, TID: pid, Comm: "python3", Kind: tracer.KindAPI, Func: "cuInit", Ret: 0})
				case 5:
					emit(tracer.Event{PID: pid, TID: pid, Kind: tracer.KindExit, Syscall: "exit"})
				}
			}
		}
		if tenth := s.n / 10; tenth > 0 && (base+s.concurrent)%tenth < s.concurrent {
			runtime.GC()
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			s.heapAt = append(s.heapAt, m.HeapInuse)
		}
	}
	return &tracer.Result{Backend: "ebpf"}, nil
}

func rssBytes() uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb * 1024
		}
	}
	return 0
}

// BenchmarkWatchMemory feeds a million short healthy processes (100 alive
// at a time) through the demultiplexer and reports the heap in use at the
// end of the run against its first tenth, and the RSS: flat means the
// per-process state is dropped at exit.
//
//	go test ./watch -run '^$' -bench WatchMemory -benchtime 1x
func BenchmarkWatchMemory(b *testing.B) {
	for _, n := range []int{100_000, 1_000_000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			for range b.N {
				s := &streamBackend{n: n, concurrent: 100}
				w := newWatcher(Options{Backend: s, identity: func(int) (snapshot.Identity, error) {
					return snapshot.Identity{Cgroup: "/kubepods/besteffort/pod5e3c1a2b-7d4f-4e1a-9b2c-0d1e2f3a4b5c/" + ctrID, UID: 0}, nil
				}})
				sum, err := w.run(context.Background())
				if err != nil {
					b.Fatal(err)
				}
				if sum.Healthy != uint64(n) || len(w.procs) != 0 {
					b.Fatalf("healthy %d of %d, %d held at the end", sum.Healthy, n, len(w.procs))
				}
				first, last := s.heapAt[0], s.heapAt[len(s.heapAt)-1]
				b.ReportMetric(float64(first)/(1<<20), "heap-MiB@10%")
				b.ReportMetric(float64(last)/(1<<20), "heap-MiB@end")
				b.ReportMetric(float64(rssBytes())/(1<<20), "rss-MiB")
				b.ReportMetric(float64(n*6)/b.Elapsed().Seconds()/float64(b.N), "events/s")
			}
		})
	}
}
