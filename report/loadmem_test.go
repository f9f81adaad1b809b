package report_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/cudatrace/cudatrace/internal/reportfixture"
	"github.com/cudatrace/cudatrace/report"
	"github.com/cudatrace/cudatrace/tracer"
)

// bigReportFile writes a report holding n events, the shape of a long
// trace that reached the stored-events cap, and returns its path and size.
func bigReportFile(b *testing.B, n int) (string, int64) {
	b.Helper()
	rep := reportfixture.Build(b, reportfixture.All[0])
	base := rep.Events
	rep.Events = make([]tracer.Event, 0, n)
	for i := range n {
		e := base[i%len(base)].Copy()
		e.Seq = uint64(i + 1)
		e.Path += strconv.Itoa(i % 1000) // not all the same string
		rep.Events = append(rep.Events, e)
	}
	rep.Trace.Stored = n
	path := filepath.Join(b.TempDir(), "big.json")
	if err := report.Save(path, rep); err != nil {
		b.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	return path, st.Size()
}

// loadMemEnv makes the test binary a helper that loads one report and
// prints how much its resident set grew doing so (BenchmarkLoadMemory).
const loadMemEnv = "CUDATRACE_LOAD_MEMORY_FILE"

func TestMain(m *testing.M) {
	if path := os.Getenv(loadMemEnv); path != "" {
		loadMemoryHelper(path)
		return
	}
	os.Exit(m.Run())
}

func loadMemoryHelper(path string) {
	runtime.GC()
	before, err1 := procStatusKiB("VmRSS")
	rep, err := report.LoadFile(path)
	peak, err2 := procStatusKiB("VmHWM")
	if err = errors.Join(err, err1, err2); err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	runtime.KeepAlive(rep)
	fmt.Printf("grew-KiB %d\n", peak-before)
}

func procStatusKiB(field string) (int64, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			return strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		}
	}
	return 0, fmt.Errorf("no %s in /proc/self/status", field)
}

// BenchmarkLoadMemory is the memory `cudatrace report` needs for a large
// report (200,000 events, the stored-events cap), as a multiple of the
// file's size (peak-x-file): the growth of a fresh process's peak resident
// set while it loads the file.
func BenchmarkLoadMemory(b *testing.B) {
	path, size := bigReportFile(b, 200_000)
	var worst int64
	for b.Loop() {
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), loadMemEnv+"="+path)
		out, err := cmd.CombinedOutput()
		if err != nil {
			b.Fatalf("helper: %v\n%s", err, out)
		}
		i := bytes.Index(out, []byte("grew-KiB "))
		if i < 0 {
			b.Fatalf("helper said:\n%s", out)
		}
		var kib int64
		fmt.Sscan(string(out[i+len("grew-KiB "):]), &kib)
		worst = max(worst, kib<<10)
	}
	b.ReportMetric(float64(size)/(1<<20), "file-MiB")
	b.ReportMetric(float64(worst)/(1<<20), "peak-MiB")
	b.ReportMetric(float64(worst)/float64(size), "peak-x-file")
}
