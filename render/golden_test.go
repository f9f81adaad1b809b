package render_test

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/cudatrace/cudatrace/analysis"
	"github.com/cudatrace/cudatrace/internal/reportfixture"
	"github.com/cudatrace/cudatrace/render"
	"github.com/cudatrace/cudatrace/report"
)

var update = flag.Bool("update", false, "rewrite testdata/golden from the current renderers")

var goldenFormats = []struct {
	f   render.Format
	ext string
}{{render.FormatText, "txt"}, {render.FormatMarkdown, "md"}, {render.FormatJSON, "json"}, {render.FormatHTML, "html"}}

// replay is what `cudatrace report FILE` does: save, load the file back,
// re-run the analysis on the stored events and snapshot.
func replay(t *testing.T, rep *report.Report) (loaded *report.Report, reanalysed analysis.Result) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "report.json")
	if err := report.Save(path, rep); err != nil {
		t.Fatal(err)
	}
	loaded, err := report.LoadFile(path)
	if err != nil {
		t.Fatalf("load what Save wrote: %v", err)
	}
	return loaded, analysis.AnalyzeFacts(loaded.Events, loaded.Snapshot, loaded.Facts())
}

func TestGolden(t *testing.T) {
	for _, fx := range reportfixture.All {
		t.Run(fx.Name, func(t *testing.T) {
			orig := reportfixture.Build(t, fx)
			loaded, again := replay(t, orig)

			// The stored analysis and a fresh one over the stored data agree,
			// and both agree with the analysis of the original data.
			if !reportfixture.SameJSON(t, loaded.Analysis, again) {
				t.Errorf("re-analysis of the loaded report differs from the stored analysis:\nstored: %s\nnow:    %s",
					reportfixture.MustJSON(t, loaded.Analysis), reportfixture.MustJSON(t, again))
			}
			if !reflect.DeepEqual(again, orig.Analysis) {
				t.Errorf("analysis after the round trip differs from the original:\norig: %s\nnow:  %s",
					reportfixture.MustJSON(t, orig.Analysis), reportfixture.MustJSON(t, again))
			}
			if !reportfixture.SameJSON(t, loaded, orig) {
				t.Error("the loaded report does not re-encode to what was saved")
			}
			loaded.Analysis = again

			for _, gf := range goldenFormats {
				var out bytes.Buffer
				if err := render.Report(&out, loaded, gf.f, render.Options{Width: 100}); err != nil {
					t.Fatalf("render %s: %v", gf.f, err)
				}
				checkGolden(t, filepath.Join("testdata", "golden", fx.Name+"."+gf.ext), out.Bytes())
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
		t.Fatalf("%v (run go test ./render -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the rendered output (go test ./render -update rewrites it); got:\n%s", path, got)
	}
}
