package watch

import (
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/cudatrace/cudatrace/snapshot"
	"github.com/cudatrace/cudatrace/tracer"
)

// failures is n processes from pid on, each denied nvidiactl and exited.
func failures(h *fakeHost, pid, n int) []tracer.Event {
	var events []tracer.Event
	for p := pid; p < pid+n; p++ {
		h.cgroups[p] = "/"
		events = append(events, append(deniedCtl(p, "job"), exitOf(p, 1))...)
	}
	return events
}

// Every snapshot of a watch reads the host's facts through one HostCache
// (issue 32 item 4: a fork storm's snapshots each read the whole kernel
// log and the driver's files, a third of watch's CPU).
func TestSnapshotsShareHostCache(t *testing.T) {
	h := &fakeHost{cgroups: map[int]string{}}
	events := failures(h, 100, 3)
	var mu sync.Mutex
	hosts := map[*snapshot.HostCache]int{}
	_, sum, _ := watchWith(t, &fakeBackend{events: events}, h, func(o *Options) {
		collect := o.System.Collect
		o.System.Collect = func(so snapshot.Options) *snapshot.Snapshot {
			mu.Lock()
			hosts[so.Host]++
			mu.Unlock()
			return collect(so)
		}
	})
	if sum.Diagnosed != 3 || len(hosts) != 1 || hosts[nil] != 0 {
		t.Errorf("%d diagnosed; the snapshots' host caches %v: want 3, all through one", sum.Diagnosed, hosts)
	}
}

// The kept reports are made durable together: one syncfs for the
// directory's file system, not two fsyncs per report; the watch's end
// syncs what is still pending.
func TestReportDirSyncsOnce(t *testing.T) {
	dir := t.TempDir()
	rd, err := OpenReportDir(dir, 10)
	if err != nil {
		t.Fatal(err)
	}
	syncs := 0
	rd.syncEvery = time.Hour // only the end's
	rd.syncfs = func(int) error { syncs++; return nil }
	h := &fakeHost{cgroups: map[int]string{}}
	_, sum, out := watchWith(t, &fakeBackend{events: failures(h, 200, 4)}, h, func(o *Options) { o.ReportDir = rd })
	names, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	if sum.Diagnosed != 4 || len(names) != 4 || len(parseLines(t, out)) != 4 {
		t.Fatalf("%d diagnosed, %d reports kept: want 4 of each", sum.Diagnosed, len(names))
	}
	if syncs != 1 {
		t.Errorf("%d syncs of the report directory's file system for 4 reports, want 1 (at the end)", syncs)
	}
}
