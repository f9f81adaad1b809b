package watch

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sync"

	"github.com/cudatrace/cudatrace/report"
)

// DefaultReportKeep is how many reports --report-dir keeps.
const DefaultReportKeep = 1000

// reportName is what newReportID makes, plus ".json": the only names a
// ReportDir ever removes.
var reportName = regexp.MustCompile(`^\d{8}T\d{6}\.\d{3}Z-\d+-[0-9a-f]{8}\.json$`)

// ReportDir keeps the full report of each diagnosis, the newest Keep of
// them: days of failures cannot fill the disk. Files are written by
// report.Save (a new temporary file, never through a symlink, renamed into
// place; the user's umask applies); only files named as reports are
// ever removed.
type ReportDir struct {
	dir  string
	keep int
	mu   sync.Mutex
	kept []string // report names in the directory, oldest first
}

// OpenReportDir checks that dir is a directory that takes new files, and
// counts the reports already there toward keep.
func OpenReportDir(dir string, keep int) (*ReportDir, error) {
	if keep < 1 {
		return nil, fmt.Errorf("--report-keep %d: keep at least 1", keep)
	}
	st, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("--report-dir %s: %w", dir, unwrapPath(err))
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("--report-dir %s is not a directory", dir)
	}
	if err := report.CheckOutput(filepath.Join(dir, "probe.json")); err != nil {
		return nil, fmt.Errorf("--report-dir: %w", err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("--report-dir %s: %w", dir, unwrapPath(err))
	}
	d := &ReportDir{dir: dir, keep: keep}
	for _, e := range entries {
		if e.Type().IsRegular() && reportName.MatchString(e.Name()) {
			d.kept = append(d.kept, e.Name())
		}
	}
	slices.Sort(d.kept)
	return d, nil
}

// Save writes rep as id.json, then removes the oldest reports past keep.
func (d *ReportDir) Save(id string, rep *report.Report) (string, error) {
	name := id + ".json"
	if !reportName.MatchString(name) {
		return "", fmt.Errorf("%q is not a report ID", id)
	}
	path := filepath.Join(d.dir, name)
	if err := report.Save(path, rep); err != nil {
		return "", err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.kept = append(d.kept, name)
	slices.Sort(d.kept) // nearly sorted: two workers finish in either order
	for len(d.kept) > d.keep {
		// os.Remove on a name removes that entry (a symlink itself,
		// never what it points to).
		if err := os.Remove(filepath.Join(d.dir, d.kept[0])); err != nil && !os.IsNotExist(err) {
			return path, fmt.Errorf("saved, but the oldest report was not removed: %w", err)
		}
		d.kept = d.kept[1:]
	}
	return path, nil
}

func unwrapPath(err error) error {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err
	}
	return err
}
