package render

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cudatrace/cudatrace/report"
	"github.com/cudatrace/cudatrace/tracer"
)

// longPathReport is a report whose one failed open is of a path n bytes
// long: a target controls its paths.
func longPathReport(n int) *report.Report {
	path := "/dev/" + strings.Repeat("nvidia/", n/7+1)[:n]
	e := tracer.Event{Seq: 1, PID: 7, TID: 7, Comm: "python3", Kind: tracer.KindOpen, Syscall: "openat", Path: path, Ret: -2}
	return &report.Report{Schema: report.SchemaVersion, Tool: report.Tool{Name: "cudatrace"}, Events: []tracer.Event{e}}
}

// Text rendering of a 1 MB path took 76 s: wrapping it re-read the whole
// rest of the path for every line. It must take about as long as writing
// the path out.
func TestRenderMegabytePath(t *testing.T) {
	rep := longPathReport(1 << 20)
	done := make(chan error, 1)
	go func() {
		for _, f := range []Format{FormatText, FormatMarkdown} {
			var out strings.Builder
			err := Report(&out, rep, f, Options{Width: 100})
			if err == nil && !strings.Contains(out.String(), "nvidia/nvidia/") {
				err = fmt.Errorf("%s: the path is not in the output", f)
			}
			if err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("rendering a 1 MB path took over 60 s")
	}
}

// BenchmarkRenderLongPath shows rendering time against path length: ns/op
// should grow linearly (4x the path, 4x the time).
func BenchmarkRenderLongPath(b *testing.B) {
	for _, n := range []int{16 << 10, 64 << 10, 256 << 10} {
		rep := longPathReport(n)
		b.Run(strconv.Itoa(n>>10)+"KiB", func(b *testing.B) {
			b.SetBytes(int64(n))
			for b.Loop() {
				if err := Report(io.Discard, rep, FormatText, Options{Width: 100}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
