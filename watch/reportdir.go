package watch

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cudatrace/cudatrace/report"
)

// DefaultReportKeep is how many reports --report-dir keeps.
const DefaultReportKeep = 1000

// reportName is what newReportID makes, plus ".json": the only names a
// ReportDir ever removes.
var reportName = regexp.MustCompile(`^\d{8}T\d{6}\.\d{3}Z-\d+-[0-9a-f]{8}\.json$`)

// ReportDir keeps the full report of each diagnosis, the newest Keep of
// them: days of failures cannot fill the disk. The directory is opened
// once, at OpenReportDir, and every report is created and removed through
// that descriptor: a directory moved or swapped for a symlink while watch
// runs is not followed. Reports name the processes' argv, environment and
// libraries, so the directory is made 0700 and each report 0600 (a new
// temporary file, never through a symlink, renamed into place); only
// files named as reports are ever removed.
type ReportDir struct {
	dir  string
	f    *os.File // the directory, opened at OpenReportDir
	keep int
	mu   sync.Mutex
	kept []string // report names in the directory, oldest first
	// flush is armed by the first report written since the last sync:
	// reports are made durable together, by one syncfs(2) at most
	// syncEvery after each is written, not two fsyncs each (a fork storm
	// of failures spent a third of watch's time in them).
	flush     *time.Timer
	syncEvery time.Duration      // defaultSyncEvery; tests lengthen it
	syncfs    func(fd int) error // unix.Syncfs; tests count the calls
}

// defaultSyncEvery bounds how long a kept report may wait to be made
// durable.
const defaultSyncEvery = time.Second

// Modes of the report directory and its reports.
const (
	reportDirMode  = 0o700
	reportFileMode = 0o600
)

// OpenReportDir checks that dir is a directory that takes new files,
// makes it 0700, and counts the reports already there toward keep.
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
	f, err := os.OpenFile(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("--report-dir %s: %w", dir, unwrapPath(err))
	}
	if err := unix.Fchmod(int(f.Fd()), reportDirMode); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("--report-dir %s: cannot make it %o: %w", dir, reportDirMode, err)
	}
	entries, err := f.ReadDir(-1)
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("--report-dir %s: %w", dir, unwrapPath(err))
	}
	d := &ReportDir{dir: dir, f: f, keep: keep, syncEvery: defaultSyncEvery, syncfs: unix.Syncfs}
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
	if _, err := report.OpenOutputIn(d.f, name, reportFileMode).Unsynced().Save(rep); err != nil {
		return "", err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.flush == nil {
		d.flush = time.AfterFunc(d.syncEvery, func() { _ = d.Sync() }) // an error is Sync's caller's at the end
	}
	d.kept = append(d.kept, name)
	slices.Sort(d.kept) // nearly sorted: two workers finish in either order
	for len(d.kept) > d.keep {
		// unlinkat removes that entry (a symlink itself, never what it
		// points to), in the directory first opened.
		if err := unix.Unlinkat(int(d.f.Fd()), d.kept[0], 0); err != nil && !errors.Is(err, unix.ENOENT) {
			return path, fmt.Errorf("saved, but the oldest report was not removed: %w", err)
		}
		d.kept = d.kept[1:]
	}
	return path, nil
}

// Sync makes the reports written so far durable: one syncfs(2) of the
// directory's file system (the renames and the files alike).
func (d *ReportDir) Sync() error {
	d.mu.Lock()
	if d.flush != nil {
		d.flush.Stop()
		d.flush = nil
	}
	d.mu.Unlock()
	if err := d.syncfs(int(d.f.Fd())); err != nil {
		return fmt.Errorf("--report-dir %s: sync: %w", d.dir, err)
	}
	return nil
}

func unwrapPath(err error) error {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err
	}
	return err
}
