package report_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/cudatrace/cudatrace/internal/reportfixture"
	"github.com/cudatrace/cudatrace/report"
)

// A report whose one note is a 30 MB string: B/op should stay a small
// multiple of the input (each member decoded once, not re-marshalled with
// the rest: a 300 MB string took 2.9 GB and 71 s, then 1.7 GB and 17 s).
func BenchmarkLoadOneHugeString(b *testing.B) {
	rep := reportfixture.Build(b, reportfixture.All[0])
	rep.Trace.Notes = []string{strings.Repeat("A", 30<<20)}
	var buf bytes.Buffer
	if err := report.WriteJSON(&buf, rep); err != nil {
		b.Fatal(err)
	}
	data := buf.Bytes()
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := report.Load(bytes.NewReader(data)); err != nil {
			b.Fatal(err)
		}
	}
}
