package watch

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

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

// failStorm feeds n short processes that each fail to open nvidiactl
// (ENOENT) and exit, as scripts/bench/watch-storm.sh's children do; their
// PIDs are not alive, so each snapshot finds its process gone.
type failStorm struct{ n int }

func (s *failStorm) Name() string { return "ebpf" }

func (s *failStorm) Run(_ context.Context, _ tracer.Spec, sink tracer.Sink) (*tracer.Result, error) {
	var seq uint64
	for i := range s.n {
		pid := 4_000_000 + i%100_000 // above any pid_max: never a live process
		for _, e := range []tracer.Event{
			{PID: pid, TID: pid, Comm: "storm", Kind: tracer.KindOpen, Syscall: "openat", Path: "/dev/nvidiactl", Ret: -2},
			{PID: pid, TID: pid, Kind: tracer.KindExit, Syscall: "exit", ExitCode: 1},
		} {
			seq++
			e.Seq, e.Time = seq, time.Duration(seq)*time.Microsecond
			sink.Event(&e)
		}
	}
	return &tracer.Result{Backend: "ebpf"}, nil
}

// BenchmarkWatchDiagnoses diagnoses a storm of failing processes with the
// live snapshot and analysis (this host's /proc, /dev, kernel log and
// driver files), with the snapshots sharing the host's facts (shared, as
// watch runs) and each reading them itself (per-process, as before
// snapshot.HostCache): diagnoses/s is the workers' throughput, the
// ceiling of watch's lines/s under a fork storm.
//
//	go test ./watch -run '^$' -bench WatchDiagnoses -benchtime 3000x -cpuprofile /tmp/cpu.out
func BenchmarkWatchDiagnoses(b *testing.B) {
	for _, shared := range []bool{true, false} {
		name := "shared"
		if !shared {
			name = "per-process"
		}
		b.Run(name, func(b *testing.B) {
			w := newWatcher(Options{Backend: &failStorm{n: b.N}, identity: func(int) (snapshot.Identity, error) {
				return snapshot.Identity{Cgroup: "/", UID: 0}, nil
			}})
			if !shared {
				w.host = nil
			}
			sum, err := w.run(context.Background())
			if err != nil {
				b.Fatal(err)
			}
			if sum.Diagnosed != uint64(b.N) {
				b.Fatalf("%d diagnosed of %d", sum.Diagnosed, b.N)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "diagnoses/s")
		})
	}
}
