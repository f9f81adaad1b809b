package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cudatrace/cudatrace/analysis"
	"github.com/cudatrace/cudatrace/internal/privtest"
	"github.com/cudatrace/cudatrace/internal/scenario"
)

// inCgroupThenRemove is the target's wrapper, as a container runtime runs a
// job: a child moves itself into the cgroup ($1) and execs the command; once
// it exits, the cgroup is removed at once. Its exit status says whether the
// removal worked.
const inCgroupThenRemove = `cg=$1; shift
/bin/sh -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$cg" "$@"
for i in 1 2 3 4 5 6 7 8 9 10; do rmdir "$cg" 2>/dev/null && exit 0; sleep 0.05; done
exit 1`

// A target that exits right after its failing open, in a cgroup removed as
// soon as it has exited: under ptrace it is held at that open's exit until
// its own view is read, so its device program is read, not inferred.
// cudatrace stays outside that cgroup (its own view would not deny), so
// only the target's view read at the failure can name the program. eBPF
// does not hold (tracer.StopSink says why) and is not asserted here.
func TestHeldSnapshotOfATargetThatExitsAtOnce(t *testing.T) {
	t.Parallel()
	privtest.RequireRoot(t)
	needBinaries(t)
	env := standIn()
	env.Prepare(t)
	for i := range 3 {
		cg, ids := scenario.TargetCgroupV2(t, []scenario.DeviceRule{{Type: 'c', Major: scenario.UVMMajor, Minor: scenario.Wildcard, Access: "rwm"}})
		target := append([]string{"/bin/sh", "-c", inCgroupThenRemove, "sh", cg}, fakecuda(env)...)
		tr := traceIn(t, env, "ptrace", nil, target...)
		if tr.code != 0 {
			t.Fatalf("run %d: exit %d: the wrapper could not remove %s\nstderr:\n%s", i, tr.code, cg, tr.stderr)
		}
		if _, err := os.Stat(cg); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("run %d: %s still exists (%v): the target's cgroup must be gone right after it", i, cg, err)
		}
		tr.failing(t, "openat", "/dev/nvidia-uvm", unix.EPERM)
		if f := finding(tr.rep, "cgroup-denied-inferred"); f != nil {
			t.Errorf("run %d: the rules were inferred, not read: %s; snapshot unavailable: %q", i, f.Summary, tr.rep.Snapshot.Unavailable)
		}
		tr.requireFinding(t, "cgroup2-denied", analysis.SeverityError)
		if text := tr.findingText("cgroup2-denied"); len(ids) != 1 || !strings.Contains(text, fmt.Sprintf("program id %d", ids[0])) {
			t.Errorf("run %d: cgroup2-denied does not name program %v:\n%s", i, ids, text)
		}
		if v2 := tr.rep.Snapshot.CgroupV2; v2 == nil || !strings.HasSuffix(cg, v2.Path) {
			t.Errorf("run %d: snapshot's cgroup %+v, want the target's %s", i, v2, cg)
		}
	}
}
