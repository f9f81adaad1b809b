package report_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/cudatrace/cudatrace/annotate"
	"github.com/cudatrace/cudatrace/report"
)

var update = flag.Bool("update", false, "rewrite testdata/golden from the current renderers")

var goldenFormats = []struct {
	f   report.Format
	ext string
}{{report.FormatText, "txt"}, {report.FormatMarkdown, "md"}, {report.FormatJSON, "json"}, {report.FormatHTML, "html"}}

// replay is what `cudatrace report FILE` does: save, load the file back,
// re-run the analysis on the stored events and snapshot.
func replay(t *testing.T, rep *report.Report) (loaded *report.Report, reanalysed annotate.Analysis) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "report.json")
	if err := report.Save(path, rep); err != nil {
		t.Fatal(err)
	}
	loaded, err := report.LoadFile(path)
	if err != nil {
		t.Fatalf("load what Save wrote: %v", err)
	}
	return loaded, annotate.AnalyzeFacts(loaded.Events, loaded.Snapshot, loaded.Facts())
}

func TestGolden(t *testing.T) {
	for _, fx := range fixtures {
		t.Run(fx.name, func(t *testing.T) {
			orig := buildFixture(t, fx)
			loaded, again := replay(t, orig)

			// The stored analysis and a fresh one over the stored data agree,
			// and both agree with the analysis of the original data.
			if !sameJSON(t, loaded.Analysis, again) {
				t.Errorf("re-analysis of the loaded report differs from the stored analysis:\nstored: %s\nnow:    %s",
					mustJSON(t, loaded.Analysis), mustJSON(t, again))
			}
			if !reflect.DeepEqual(again, orig.Analysis) {
				t.Errorf("analysis after the round trip differs from the original:\norig: %s\nnow:  %s",
					mustJSON(t, orig.Analysis), mustJSON(t, again))
			}
			if !sameJSON(t, loaded, orig) {
				t.Error("the loaded report does not re-encode to what was saved")
			}
			loaded.Analysis = again

			for _, gf := range goldenFormats {
				var out bytes.Buffer
				if err := report.Render(&out, loaded, gf.f, report.RenderOptions{Width: 100}); err != nil {
					t.Fatalf("render %s: %v", gf.f, err)
				}
				checkGolden(t, filepath.Join("testdata", "golden", fx.name+"."+gf.ext), out.Bytes())
			}
		})
	}
}

func checkGolden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./report -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the rendered output (go test ./report -update rewrites it); got:\n%s", path, got)
	}
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func sameJSON(t testing.TB, a, b any) bool {
	t.Helper()
	return bytes.Equal(mustJSON(t, a), mustJSON(t, b))
}
