package ptrace

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/cudatrace/cudatrace/tracer"
)

// The benchmarks report what the target itself measured, target-ns/call:
// the cost of one syscall inside a traced target. "open" is traced (an
// open+close of /dev/null, with its major given as the NVIDIA major, so
// each open is an event); "getppid" is not.

func benchResult(b *testing.B, out string) {
	b.Helper()
	data, err := os.ReadFile(out)
	if err != nil {
		b.Fatal(err)
	}
	ns, err := strconv.ParseFloat(string(data), 64)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(ns, "target-ns/call")
}

func benchUntraced(b *testing.B, kind string) {
	out := filepath.Join(b.TempDir(), "ns")
	argv := helperArgv("bench", kind, strconv.Itoa(b.N), out)
	if err := exec.Command(argv[0], argv[1:]...).Run(); err != nil {
		b.Fatal(err)
	}
	benchResult(b, out)
}

func benchLaunch(b *testing.B, kind string) {
	out := filepath.Join(b.TempDir(), "ns")
	_, err := New().Run(context.Background(), tracer.Spec{Argv: helperArgv("bench", kind, strconv.Itoa(b.N), out), DeviceMajors: []uint32{1}}, tracer.SinkFunc(func(*tracer.Event) {}))
	if err != nil {
		b.Fatal(err)
	}
	benchResult(b, out)
}

func benchAttach(b *testing.B, kind string) {
	dir := b.TempDir()
	out, start := filepath.Join(dir, "ns"), filepath.Join(dir, "go")
	argv := helperArgv("bench", kind, strconv.Itoa(b.N), out, start)
	cmd := exec.Command(argv[0], argv[1:]...)
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := New().Run(context.Background(), tracer.Spec{PIDs: []int{cmd.Process.Pid}, DeviceMajors: []uint32{1}}, tracer.SinkFunc(func(*tracer.Event) {}))
		done <- err
	}()
	// Start the loop once every thread is traced.
	for traced := false; !traced; time.Sleep(time.Millisecond) {
		tids, _ := listTasks(cmd.Process.Pid)
		traced = len(tids) > 0
		for _, tid := range tids {
			traced = traced && tracerOf(tid) != 0
		}
	}
	os.WriteFile(start, nil, 0o644)
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	cmd.Wait()
	benchResult(b, out)
}

func BenchmarkUntracedGetppid(b *testing.B) { benchUntraced(b, "getppid") }
func BenchmarkUntracedOpen(b *testing.B)    { benchUntraced(b, "open") }
func BenchmarkSeccompGetppid(b *testing.B)  { benchLaunch(b, "getppid") }
func BenchmarkSeccompOpen(b *testing.B)     { benchLaunch(b, "open") }
func BenchmarkAttachGetppid(b *testing.B)   { benchAttach(b, "getppid") }
func BenchmarkAttachOpen(b *testing.B)      { benchAttach(b, "open") }
