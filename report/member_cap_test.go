package report_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/cudatrace/cudatrace/internal/reportfixture"
	"github.com/cudatrace/cudatrace/report"
)

// A member past report.MaxMemberSize (one huge string) is refused in one
// line before it is buffered whole: a 300 MB one-string report took 1.7 GB.
func TestLoadRefusesHugeMember(t *testing.T) {
	for _, where := range []string{"note", "event"} {
		rep := reportfixture.Build(t, reportfixture.All[0])
		huge := strings.Repeat("A", report.MaxMemberSize+1)
		if where == "note" {
			rep.Trace.Notes = []string{huge}
		} else {
			rep.Events[0].Path = huge
		}
		var buf bytes.Buffer
		if err := report.WriteJSON(&buf, rep); err != nil {
			t.Fatal(err)
		}
		_, err := report.Load(&buf)
		if !errors.Is(err, report.ErrCorrupt) || !strings.Contains(err.Error(), "MiB") || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: Load: %v, want one line refusing a member over %d MiB", where, err, report.MaxMemberSize>>20)
		}
	}
	// Just under the cap still loads.
	rep := reportfixture.Build(t, reportfixture.All[0])
	rep.Trace.Notes = []string{strings.Repeat("A", 1<<20)}
	var buf bytes.Buffer
	if err := report.WriteJSON(&buf, rep); err != nil {
		t.Fatal(err)
	}
	if _, err := report.Load(&buf); err != nil {
		t.Errorf("a 1 MiB note: %v", err)
	}
}
