package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cudatrace/cudatrace/analysis"
	"github.com/cudatrace/cudatrace/internal/privtest"
	"github.com/cudatrace/cudatrace/internal/scenario"
	"github.com/cudatrace/cudatrace/render"
	"github.com/cudatrace/cudatrace/report"
	"github.com/cudatrace/cudatrace/tracer"
)

// backends are those the e2e scenarios run under: both, or those named in
// CUDATRACE_TEST_BACKENDS (to run one alone).
var backends = testBackends()

func testBackends() []string {
	if v := os.Getenv("CUDATRACE_TEST_BACKENDS"); v != "" {
		return strings.Split(v, ",")
	}
	return []string{"ebpf", "ptrace"}
}

// lingerArgs keep fakecuda alive after its first cuInit (a second run
// follows after a pause), so the failure snapshot sees a live target.
// Without them it exits microseconds after the failing call and the
// snapshot falls back to the exit-time view; both must give one verdict.
var lingerArgs = []string{"--loop", "2", "--interval", "300ms"}

// traceRun is one cudatrace run inside a scenario.
type traceRun struct {
	result
	rep     *report.Report
	backend string
}

// traceIn runs `cudatrace --backend B --proc-devices P -o R ARGS -- TARGET`
// inside env (prepared with t) and loads the report.
func traceIn(t *testing.T, env *scenario.Env, backend string, args []string, target ...string) traceRun {
	t.Helper()
	needBinaries(t)
	env.Prepare(t)
	out := filepath.Join(t.TempDir(), "report.json")
	argv := []string{cudatraceBin, "--backend", backend, "-o", out}
	if p := env.ProcDevicesPath(); p != "" {
		argv = append(argv, "--proc-devices", p)
	}
	argv = append(append(append(argv, args...), "--"), target...)
	r := runBinary(t, env.Command(t, argv...))
	rep, err := report.LoadFile(out)
	if err != nil {
		t.Fatalf("%s: load report: %v\nexit %d, stderr:\n%s", backend, err, r.code, r.stderr)
	}
	if rep.Trace.Backend != backend {
		t.Errorf("report names backend %q, want %q", rep.Trace.Backend, backend)
	}
	// eBPF names its hook: a launched trace keeps the raw tracepoints
	// where fentry is allowed too (fentry is watch's); ptrace names none.
	if want := map[string]string{"ebpf": "raw_tracepoint"}[backend]; rep.Trace.SyscallHook != want {
		t.Errorf("%s: report's syscall hook %q, want %q", backend, rep.Trace.SyscallHook, want)
	}
	if backend == "ebpf" && !hasVariants(rep.Trace.Variants) {
		t.Errorf("ebpf: report's kernel variants %q, want one for each probed feature", rep.Trace.Variants)
	}
	if rep.Trace.Dropped != 0 || !rep.Trace.Complete {
		t.Errorf("%s: %d events dropped (complete=%v)", backend, rep.Trace.Dropped, rep.Trace.Complete)
	}
	return traceRun{result: r, rep: rep, backend: backend}
}

// fakecuda is the target command line for env.
func fakecuda(env *scenario.Env, extra ...string) []string {
	argv := []string{fakecudaBin}
	if p := env.ProcDevicesPath(); p != "" {
		argv = append(argv, "--proc-devices", p)
	}
	return append(argv, extra...)
}

func loadReportText(t *testing.T, s string) *report.Report {
	t.Helper()
	rep, err := report.Load(strings.NewReader(s))
	if err != nil {
		t.Fatalf("load report from output: %v\n%s", err, s)
	}
	return rep
}

func finding(rep *report.Report, id string) *analysis.Finding {
	for i := range rep.Analysis.Findings {
		if rep.Analysis.Findings[i].ID == id {
			return &rep.Analysis.Findings[i]
		}
	}
	return nil
}

func findingIDs(rep *report.Report) []string {
	var ids []string
	for _, f := range rep.Analysis.Findings {
		ids = append(ids, f.ID)
	}
	return ids
}

// text is everything a finding says, for "mentions" checks.
func (tr traceRun) findingText(id string) string {
	f := finding(tr.rep, id)
	if f == nil {
		return ""
	}
	return strings.Join(append([]string{f.Summary, f.Fix}, f.Detail...), "\n")
}

func (tr traceRun) requireFinding(t *testing.T, id string, sev analysis.Severity) *analysis.Finding {
	t.Helper()
	f := finding(tr.rep, id)
	if f == nil {
		t.Fatalf("%s: no %s finding; findings %v; verdict %q", tr.backend, id, findingIDs(tr.rep), tr.rep.Analysis.Verdict)
	}
	if f.Severity != sev {
		t.Errorf("%s: %s has severity %s, want %s", tr.backend, id, f.Severity, sev)
	}
	return f
}

// failing returns the failing call, checking its syscall, path and errno.
func (tr traceRun) failing(t *testing.T, syscall, path string, errno unix.Errno) *tracer.Event {
	t.Helper()
	f := tr.rep.Analysis.Failing
	if f == nil {
		t.Fatalf("%s: no failing call; verdict %q", tr.backend, tr.rep.Analysis.Verdict)
	}
	if f.Syscall != syscall || f.Path != path || f.Errno() != errno {
		t.Fatalf("%s: failing call %s(%q) = %s, want %s(%q) = %s", tr.backend, f.Syscall, f.Path, f.ErrnoName(), syscall, path, unix.ErrnoName(errno))
	}
	return f
}

// targetExecs are the successful execs of path, in order: the fakecuda
// processes (each --fork-depth level re-executes itself).
func (tr traceRun) targetExecs(path string) []tracer.Event {
	var out []tracer.Event
	for _, e := range tr.rep.Events {
		if e.Kind == tracer.KindExec && e.Ret == 0 && (e.Path == path || len(e.Argv) > 0 && e.Argv[0] == path) {
			out = append(out, e)
		}
	}
	return out
}

// checkStreams: the target's stdout is untouched; the report goes to stderr.
func (tr traceRun) checkStreams(t *testing.T, cuInit string, times int) {
	t.Helper()
	want := strings.Repeat("cuInit "+cuInit+"\n", times)
	if tr.stdout != want {
		t.Errorf("%s: stdout %q, want %q (the target's output only)", tr.backend, tr.stdout, want)
	}
	if verdict := tr.rep.Analysis.Verdict; verdict == "" || !strings.Contains(tr.stderr, verdict) {
		t.Errorf("%s: stderr does not carry the report's verdict %q:\n%s", tr.backend, verdict, tr.stderr)
	}
}

// hasVariants: the eBPF report names the variant chosen for each feature
// with a fallback (docs/kernels.md).
func hasVariants(v []string) bool {
	for _, f := range []string{"memlock=", "scans=", "task-reads=", "uprobes="} {
		if !slices.ContainsFunc(v, func(s string) bool { return strings.HasPrefix(s, f) }) {
			return false
		}
	}
	return true
}

// bothBackends runs the same scenario under each backend (a fresh Env
// each, from mk) in parallel, then checks each with check and compares
// the two reports' findings.
func bothBackends(t *testing.T, mk func() *scenario.Env, args []string, target []string, check func(t *testing.T, env *scenario.Env, tr traceRun)) {
	t.Helper()
	bothBackendsPrepared(t, mk, nil, args, target, check)
}

// bothBackendsPrepared is bothBackends with a hook run on each prepared Env.
func bothBackendsPrepared(t *testing.T, mk func() *scenario.Env, setup func(*testing.T, *scenario.Env), args []string, target []string, check func(t *testing.T, env *scenario.Env, tr traceRun)) {
	t.Helper()
	privtest.RequireRoot(t)
	needBinaries(t)
	runs := make([]traceRun, len(backends))
	envs := make([]*scenario.Env, len(backends))
	for i := range backends {
		envs[i] = mk()
		envs[i].Prepare(t)
		if setup != nil {
			setup(t, envs[i])
		}
	}
	var wg sync.WaitGroup
	errs := make([]string, len(backends))
	for i, b := range backends {
		wg.Go(func() {
			// t.Fatal must not run off the test goroutine: a sub-T
			// records failures and the run is checked below.
			ft := &collectT{}
			runs[i] = traceInCollect(ft, t, envs[i], b, args, fakeOr(envs[i], target))
			errs[i] = ft.msg
		})
	}
	wg.Wait()
	for i, b := range backends {
		t.Run(b, func(t *testing.T) {
			if errs[i] != "" {
				t.Fatal(errs[i])
			}
			check(t, envs[i], runs[i])
		})
	}
	if len(runs) == 2 && !slices.ContainsFunc(errs, func(e string) bool { return e != "" }) {
		t.Run("parity", func(t *testing.T) { parity(t, runs[0], runs[1]) })
	}
}

// fakeOr is target, or fakecuda when target is nil; a target starting
// with "fakecuda" gets the built binary and env's --proc-devices.
func fakeOr(env *scenario.Env, target []string) []string {
	if target == nil {
		return fakecuda(env)
	}
	if target[0] == "fakecuda" {
		return fakecuda(env, target[1:]...)
	}
	return target
}

// collectT records a failure from a goroutine other than the test's.
type collectT struct {
	mu  sync.Mutex
	msg string
}

func (c *collectT) fail(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.msg == "" {
		c.msg = fmt.Sprintf(format, args...)
	}
}

// traceInCollect is traceIn for a goroutine: it runs without t.Fatal and
// leaves the report checks to the caller's subtest.
func traceInCollect(c *collectT, t *testing.T, env *scenario.Env, backend string, args []string, target []string) traceRun {
	out := filepath.Join(t.TempDir(), "report-"+backend+".json")
	argv := []string{cudatraceBin, "--backend", backend, "-o", out}
	if p := env.ProcDevicesPath(); p != "" {
		argv = append(argv, "--proc-devices", p)
	}
	argv = append(append(append(argv, args...), "--"), target...)
	cmd := env.Command(t, argv...)
	var so, se strings.Builder
	cmd.Stdout, cmd.Stderr = &so, &se
	err, hung := runGuarded(cmd)
	r := result{stdout: so.String(), stderr: se.String()}
	if hung {
		c.fail("%s: cudatrace hung (killed after %v)\nstderr:\n%s", backend, hangLimit, r.stderr)
	}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
		if r.code < 0 {
			c.fail("%s: cudatrace killed by a signal: %v\n%s", backend, err, r.stderr)
		}
	} else if err != nil {
		c.fail("%s: run: %v", backend, err)
	}
	if r.code == scenario.SetupFailed && strings.Contains(r.stderr, "scenario setup:") {
		c.fail("scenario setup failed:\n%s", r.stderr)
	}
	rep, err := report.LoadFile(out)
	if err != nil {
		c.fail("%s: load report: %v\nexit %d, stderr:\n%s", backend, err, r.code, r.stderr)
	}
	return traceRun{result: r, rep: rep, backend: backend}
}

// commonChecks apply to every live run.
func commonChecks(t *testing.T, tr traceRun) {
	t.Helper()
	noCrash(t, tr.stdout+tr.stderr)
	if tr.rep.Trace.Backend != tr.backend {
		t.Errorf("report names backend %q, want %q", tr.rep.Trace.Backend, tr.backend)
	}
	if tr.rep.Trace.Dropped != 0 || !tr.rep.Trace.Complete {
		t.Errorf("%d events dropped (complete=%v)", tr.rep.Trace.Dropped, tr.rep.Trace.Complete)
	}
	if tr.rep.Trace.Source != "live" || tr.rep.Schema != report.SchemaVersion {
		t.Errorf("source %q schema %d", tr.rep.Trace.Source, tr.rep.Schema)
	}
	roundTrip(t, tr)
}

// parity: both backends reach the same findings about the same call.
func parity(t *testing.T, a, b traceRun) {
	t.Helper()
	type fsum struct {
		ID       string
		Severity analysis.Severity
		Inferred bool
	}
	sum := func(tr traceRun) []fsum {
		var out []fsum
		for _, f := range tr.rep.Analysis.Findings {
			out = append(out, fsum{f.ID, f.Severity, f.Inferred})
		}
		return out
	}
	if sa, sb := sum(a), sum(b); !slices.Equal(sa, sb) {
		t.Errorf("findings differ:\n%s: %v\n%s: %v", a.backend, sa, b.backend, sb)
	}
	type call struct {
		Kind           tracer.Kind
		Syscall, Path  string
		Errno          string
		Flags          uint64
		Request        uint32
		Dev            string
		TopPID, Thread bool // made by the first traced process; by its main thread
	}
	describe := func(tr traceRun) *call {
		f := tr.rep.Analysis.Failing
		if f == nil {
			return nil
		}
		c := &call{Kind: f.Kind, Syscall: f.Syscall, Path: f.Path, Errno: f.ErrnoName(), Flags: f.Flags, Request: f.Request,
			TopPID: len(tr.rep.Events) > 0 && f.PID == tr.rep.Events[0].PID, Thread: f.TID != f.PID}
		if f.Dev != nil {
			c.Dev = f.Dev.String()
		}
		return c
	}
	ca, cb := describe(a), describe(b)
	if (ca == nil) != (cb == nil) || ca != nil && *ca != *cb {
		t.Errorf("failing call differs:\n%s: %+v\n%s: %+v", a.backend, ca, b.backend, cb)
	}
	if a.code != b.code || a.stdout != b.stdout {
		t.Errorf("target behaved differently: %s exit %d stdout %q; %s exit %d stdout %q", a.backend, a.code, a.stdout, b.backend, b.code, b.stdout)
	}
}

// snapshotNode is the snapshot's view of a /dev path.
func snapshotNode(t *testing.T, rep *report.Report, path string) (major, minor uint32, exists bool) {
	t.Helper()
	if rep.Snapshot == nil {
		t.Fatal("report has no snapshot")
	}
	for _, n := range rep.Snapshot.Nodes {
		if n.Path == path {
			return n.Major, n.Minor, n.Exists
		}
	}
	t.Fatalf("snapshot lists no node %s", path)
	return
}

// nextOpen is the first open of path after the event seq.
func nextOpen(rep *report.Report, seq uint64, path string) *tracer.Event {
	for i := range rep.Events {
		e := &rep.Events[i]
		if e.Seq > seq && e.Kind == tracer.KindOpen && e.Path == path {
			return e
		}
	}
	return nil
}

func denyUVM() *scenario.Env {
	return &scenario.Env{
		Nodes:        scenario.StandInNodes(),
		ProcDevices:  scenario.StandInProcDevices,
		CgroupV2Deny: []scenario.DeviceRule{{Type: 'c', Major: scenario.UVMMajor, Minor: scenario.Wildcard, Access: "rwm"}},
	}
}

func standIn() *scenario.Env {
	return &scenario.Env{Nodes: scenario.StandInNodes(), ProcDevices: scenario.StandInProcDevices}
}

func withoutNode(nodes []scenario.Node, path string) []scenario.Node {
	return slices.DeleteFunc(slices.Clone(nodes), func(n scenario.Node) bool { return n.Path == path })
}

func withNode(nodes []scenario.Node, n scenario.Node) []scenario.Node {
	return append(withoutNode(nodes, n.Path), n)
}

const openFlags = unix.O_RDWR | unix.O_CLOEXEC

func TestHealthy(t *testing.T) {
	t.Parallel()
	bothBackends(t, standIn, nil, nil, func(t *testing.T, env *scenario.Env, tr traceRun) {
		commonChecks(t, tr)
		tr.checkStreams(t, "0", 1)
		if tr.code != 0 || tr.rep.Target.Exit == nil || tr.rep.Target.Exit.Code != 0 {
			t.Errorf("exit %d, report exit %+v; want the target's 0", tr.code, tr.rep.Target.Exit)
		}
		// The stand-in uvm driver (vcs) answers every ioctl with ENOTTY,
		// which fakecuda takes as success but a real UVM_INITIALIZE would
		// not: that one ioctl may be pinpointed. Nothing else may.
		standInArtefact := func(f *tracer.Event) bool {
			return f.Kind == tracer.KindIoctl && f.Request == 0x30000001 && f.Errno() == unix.ENOTTY &&
				f.Dev != nil && *f.Dev == tracer.Dev{Major: scenario.UVMMajor, Minor: scenario.UVMMinor}
		}
		for _, e := range tr.rep.Events {
			if e.Kind != tracer.KindIoctl && strings.HasPrefix(e.Path, "/dev/nvidia") && e.Failed() {
				t.Errorf("healthy run: %s(%q) = %s", e.Syscall, e.Path, e.ErrnoName())
			}
		}
		if f := tr.rep.Analysis.Failing; f != nil && !standInArtefact(f) {
			t.Errorf("a healthy cuInit (it printed cuInit 0) has a failing call: %s(%q, fd %d, request %#x) = %s; verdict %q",
				f.Syscall, f.Path, f.FD, f.Request, f.ErrnoName(), tr.rep.Analysis.Verdict)
		}
		ok := tr.requireFinding(t, "calls-ok", analysis.SeverityInfo)
		text := tr.findingText("calls-ok")
		for _, node := range []string{"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia0"} {
			if !strings.Contains(text, node) {
				t.Errorf("calls-ok does not name %s: %q", node, ok.Summary)
			}
		}
	})
}

// lifetimes runs body with a target that exits right after cuInit, and
// with one that lingers.
func lifetimes(t *testing.T, body func(t *testing.T, target []string, runs int)) {
	for _, v := range []struct {
		name   string
		target []string
		runs   int
	}{
		{"exits", nil, 1},
		{"lingers", append([]string{"fakecuda"}, lingerArgs...), 2},
	} {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			body(t, v.target, v.runs)
		})
	}
}

func TestCgroup2DeniesUVM(t *testing.T) {
	t.Parallel()
	lifetimes(t, testCgroup2DeniesUVM)
}

func testCgroup2DeniesUVM(t *testing.T, target []string, runs int) {
	bothBackends(t, denyUVM, nil, target, func(t *testing.T, env *scenario.Env, tr traceRun) {
		commonChecks(t, tr)
		tr.checkStreams(t, "999", runs)
		if tr.code != 0 {
			t.Errorf("exit %d, want the target's 0", tr.code)
		}
		f := tr.failing(t, "openat", "/dev/nvidia-uvm", unix.EPERM)
		if f.Flags != openFlags {
			t.Errorf("failing flags %#x, want O_RDWR|O_CLOEXEC", f.Flags)
		}
		if retry := nextOpen(tr.rep, f.Seq, f.Path); retry == nil || retry.Flags != unix.O_RDWR || retry.Errno() != unix.EPERM {
			t.Errorf("the O_RDWR retry is not the next open of /dev/nvidia-uvm: %+v", retry)
		}
		if maj, min, ok := snapshotNode(t, tr.rep, "/dev/nvidia-uvm"); !ok || maj != scenario.UVMMajor || min != scenario.UVMMinor {
			t.Errorf("snapshot: /dev/nvidia-uvm %d:%d exists=%v, want 7:0", maj, min, ok)
		}
		execs := tr.targetExecs(fakecudaBin)
		if len(execs) != 1 || execs[0].PID != f.PID || f.TID != f.PID {
			t.Errorf("failing pid %d tid %d; fakecuda execs %+v", f.PID, f.TID, execs)
		}
		ids := env.ProgramIDs()
		tr.requireFinding(t, "cgroup2-denied", analysis.SeverityError)
		text := tr.findingText("cgroup2-denied")
		if len(ids) != 1 || !strings.Contains(text, fmt.Sprintf("program id %d", ids[0])) && !strings.Contains(text, fmt.Sprintf("program %d", ids[0])) {
			t.Errorf("cgroup2-denied does not name program %v:\n%s", ids, text)
		}
		if fix := finding(tr.rep, "cgroup2-denied").Fix; !strings.Contains(fix, "c 7:* rwm") {
			t.Errorf("fix %q lacks c 7:* rwm", fix)
		}
		if !strings.Contains(tr.findingText("calls-ok"), "/dev/nvidiactl") {
			t.Errorf("calls-ok does not name /dev/nvidiactl, the contrast")
		}
	})
}

// roundTrip: `cudatrace report FILE --format json` re-analyses the saved
// report to the same findings, and says nothing differs.
func roundTrip(t *testing.T, tr traceRun) {
	t.Helper()
	dir := t.TempDir()
	saved := filepath.Join(dir, "r.json")
	if err := report.Save(saved, tr.rep); err != nil {
		t.Fatal(err)
	}
	r := runBinary(t, exec.Command(cudatraceBin, "report", saved, "--format", "json"))
	want := exitOK
	switch {
	case tr.rep.Analysis.Failing != nil:
		want = exitFound
	case len(render.SummaryRows(tr.rep)) == 0:
		// A run of no NVIDIA call: printed, then 4, as explain of such a log.
		want = exitBadInput
	}
	if r.code != want {
		t.Errorf("report: exit %d, want %d; stderr:\n%s", r.code, want, r.stderr)
	}
	if strings.Contains(r.stderr, "differs") {
		t.Errorf("report re-analysis differs: %s", r.stderr)
	}
	again := loadReportText(t, r.stdout)
	if a, b := fmt.Sprintf("%+v", again.Analysis.Findings), fmt.Sprintf("%+v", tr.rep.Analysis.Findings); a != b {
		t.Errorf("findings after round trip:\n%s\nwant:\n%s", a, b)
	}
	if a, b := fmt.Sprintf("%+v", again.Analysis.Failing), fmt.Sprintf("%+v", tr.rep.Analysis.Failing); a != b {
		t.Errorf("failing call after round trip %s, want %s", a, b)
	}
	// Text and Markdown render too.
	for _, f := range []string{"text", "markdown"} {
		r := runBinary(t, exec.Command(cudatraceBin, "report", saved, "--format", f))
		if r.code != want || !strings.Contains(r.stdout, tr.rep.Analysis.Verdict) && !strings.Contains(r.stdout, "cuInit") {
			t.Errorf("report --format %s: exit %d\n%s", f, r.code, r.stdout)
		}
	}
}

func TestCgroup2StaleMajor(t *testing.T) {
	t.Parallel()
	const stale = 504
	mk := func() *scenario.Env {
		return &scenario.Env{
			Nodes: scenario.StandInNodes(), ProcDevices: scenario.StandInProcDevices,
			CgroupV2AllowOnly: []scenario.DeviceRule{
				{Type: 'c', Major: 1, Minor: scenario.Wildcard, Access: "rwm"},
				{Type: 'c', Major: stale, Minor: scenario.Wildcard, Access: "rwm"},
			},
		}
	}
	bothBackends(t, mk, nil, nil, func(t *testing.T, env *scenario.Env, tr traceRun) {
		commonChecks(t, tr)
		tr.checkStreams(t, "999", 1)
		tr.failing(t, "openat", "/dev/nvidia-uvm", unix.EPERM)
		id := "cgroup2-stale-major"
		if finding(tr.rep, id) == nil {
			id = "cgroup2-denied"
		}
		tr.requireFinding(t, id, analysis.SeverityError)
		text := tr.findingText(id)
		if !strings.Contains(text, "504") || !strings.Contains(text, "c 7:* rwm") {
			t.Errorf("%s does not mention both the stale 504 and the current 7:\n%s", id, text)
		}
	})
}

// The denying program sits on the parent of the target's cgroup (a slice
// above a container), and the target's own cgroup has a program that
// allows every device: the fix names the parent, where the program is, and
// says a rule in the target's own cgroup cannot lift it (issue 27 class 5).
func TestCgroup2DenyFromAbove(t *testing.T) {
	t.Parallel()
	mk := func() *scenario.Env {
		env := standIn()
		env.CgroupV2Deny = []scenario.DeviceRule{{Type: 'c', Major: scenario.UVMMajor, Minor: scenario.Wildcard, Access: "rwm"}}
		env.CgroupV2Leaf = true
		return env
	}
	bothBackends(t, mk, nil, nil, func(t *testing.T, env *scenario.Env, tr traceRun) {
		commonChecks(t, tr)
		tr.failing(t, "openat", "/dev/nvidia-uvm", unix.EPERM)
		tr.requireFinding(t, "cgroup2-denied", analysis.SeverityError)
		f := finding(tr.rep, "cgroup2-denied")
		parent := strings.TrimPrefix(env.CgroupV2Path(), scenario.CgroupV2Root())
		leaf := strings.TrimPrefix(env.CgroupV2LeafPath(), scenario.CgroupV2Root())
		for _, want := range []string{"inherited from " + parent, "above the target's cgroup " + leaf, "cannot lift it", "the device cgroup " + parent} {
			if !strings.Contains(f.Fix, want) {
				t.Errorf("fix lacks %q:\n%s", want, f.Fix)
			}
		}
	})
}

// A v1 devices cgroup in the shape Docker and LXC write (deny all, then an
// allow list) that lacks uvm's major: devices.list shows the list, so the
// verdict names it.
func TestCgroup1AllowList(t *testing.T) {
	t.Parallel()
	privtest.RequireRoot(t)
	if scenario.CgroupV1DevicesRoot() == "" {
		privtest.Skip(t, "the cgroup v1 devices controller is not mounted")
	}
	mk := func() *scenario.Env {
		env := standIn()
		env.CgroupV1Deny = []string{"a"}
		return env
	}
	allow := func(t *testing.T, env *scenario.Env) {
		// mem (null, zero, full, the nvidiactl and nvidia0 stand-ins), tty
		// and pts: everything but vcs, uvm's stand-in.
		for _, rule := range []string{"c 1:* rwm", "c 5:* rwm", "c 136:* rwm", "c 4:* rwm"} {
			if err := os.WriteFile(filepath.Join(env.CgroupV1Path(), "devices.allow"), []byte(rule), 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	// lingerArgs: the process outlives its failing open by the snapshot's
	// reads (a target gone before them leaves cudatrace's own view, and
	// the rules are then only inferred; fakecuda alone exits at once).
	bothBackendsPrepared(t, mk, allow, nil, append([]string{"fakecuda"}, lingerArgs...), func(t *testing.T, env *scenario.Env, tr traceRun) {
		commonChecks(t, tr)
		tr.checkStreams(t, "999", 2)
		tr.failing(t, "openat", "/dev/nvidia-uvm", unix.EPERM)
		tr.requireFinding(t, "cgroup1-denied", analysis.SeverityError)
		if text := tr.findingText("cgroup1-denied"); !strings.Contains(text, "c 7:* rwm") {
			t.Errorf("cgroup1-denied lacks the fix c 7:* rwm:\n%s", text)
		}
	})
}

// A deny rule in an allow-by-default v1 cgroup: the kernel's devices.list
// then shows only "a *:* rwm" and hides the exception, so cudatrace cannot
// read the rule, but it must not conclude that the cgroup allows the
// access: EPERM from an open with the mode and nodev fine is the cgroup.
func TestCgroup1DenyException(t *testing.T) {
	t.Parallel()
	privtest.RequireRoot(t)
	if scenario.CgroupV1DevicesRoot() == "" {
		privtest.Skip(t, "the cgroup v1 devices controller is not mounted")
	}
	mk := func() *scenario.Env {
		env := standIn()
		env.CgroupV1Deny = []string{"c 7:0 rwm"}
		return env
	}
	bothBackends(t, mk, nil, nil, func(t *testing.T, env *scenario.Env, tr traceRun) {
		commonChecks(t, tr)
		tr.checkStreams(t, "999", 1)
		tr.failing(t, "openat", "/dev/nvidia-uvm", unix.EPERM)
		if finding(tr.rep, "cgroup1-denied") == nil && finding(tr.rep, "cgroup-denied-inferred") == nil {
			t.Errorf("findings %v, want cgroup1-denied or cgroup-denied-inferred: devices.list %+v cannot show deny exceptions; verdict %q",
				findingIDs(tr.rep), tr.rep.Snapshot.CgroupV1, tr.rep.Analysis.Verdict)
		}
		// The EPERM's alternatives weigh a seccomp filter. ptrace's own
		// SECCOMP_RET_TRACE filter is on the target, and is never taken
		// for the target's (issue 27 class 6).
		for _, f := range tr.rep.Analysis.Findings {
			if text := tr.findingText(f.ID); strings.Contains(text, "seccomp filter(s) of its own") {
				t.Errorf("%s: %s names a seccomp filter the target does not have:\n%s", tr.backend, f.ID, text)
			}
		}
	})
}

// As nobody, libcuda's repair (mknodat) fails and the open finds nothing.
func TestNodeMissingUnprivileged(t *testing.T) {
	t.Parallel()
	mk := func() *scenario.Env {
		env := standIn()
		env.Nodes = withoutNode(env.Nodes, "nvidia-uvm")
		return env
	}
	lifetimes(t, func(t *testing.T, target []string, runs int) {
		testNodeMissingUnprivileged(t, mk, target, runs)
	})
}

func testNodeMissingUnprivileged(t *testing.T, mk func() *scenario.Env, target []string, runs int) {
	bothBackends(t, mk, []string{"-u", "nobody"}, target, func(t *testing.T, env *scenario.Env, tr traceRun) {
		commonChecks(t, tr)
		tr.checkStreams(t, "999", runs)
		f := tr.failing(t, "openat", "/dev/nvidia-uvm", unix.ENOENT)
		var mknod *tracer.Event
		for i := range tr.rep.Events {
			e := &tr.rep.Events[i]
			if e.Kind == tracer.KindMknod && e.Path == "/dev/nvidia-uvm" && e.Seq < f.Seq {
				mknod = e
			}
		}
		if mknod == nil || (mknod.Errno() != unix.EACCES && mknod.Errno() != unix.EPERM) {
			t.Errorf("no failed mknodat of /dev/nvidia-uvm before the open: %+v", mknod)
		}
		tr.requireFinding(t, "node-missing", analysis.SeverityError)
		if tr.rep.Target.UID != 65534 && tr.rep.Target.User != "nobody" {
			t.Errorf("report target uid %d user %q, want nobody", tr.rep.Target.UID, tr.rep.Target.User)
		}
	})
}

// As root, libcuda (fakecuda) recreates the node: the run works, and the
// report says a repair happened instead of calling it clean.
func TestNodeRepairedByRoot(t *testing.T) {
	t.Parallel()
	mk := func() *scenario.Env {
		env := standIn()
		env.Nodes = withoutNode(env.Nodes, "nvidia-uvm")
		return env
	}
	bothBackends(t, mk, nil, nil, func(t *testing.T, env *scenario.Env, tr traceRun) {
		commonChecks(t, tr)
		tr.checkStreams(t, "0", 1)
		repaired := false
		for _, e := range tr.rep.Events {
			if e.Kind == tracer.KindMknod && e.Path == "/dev/nvidia-uvm" && e.Ret == 0 {
				repaired = true
				if e.Dev == nil || *e.Dev != (tracer.Dev{Major: scenario.UVMMajor, Minor: 0}) {
					t.Errorf("mknodat dev %v, want 7:0", e.Dev)
				}
			}
		}
		if !repaired {
			t.Error("no successful mknodat of /dev/nvidia-uvm in the trace")
		}
		tr.requireFinding(t, "node-repaired", analysis.SeverityWarning)
		if f := tr.rep.Analysis.Failing; f != nil && f.Kind != tracer.KindIoctl {
			t.Errorf("the repaired node's first failure is still pinpointed: %+v", f)
		}
	})
}

// A node on a major no driver owns (238, uvm's on the H200; 7 is
// registered) fails with ENXIO: a stale node, which nobody cannot repair.
func TestNodeStaleMajor(t *testing.T) {
	t.Parallel()
	mk := func() *scenario.Env {
		env := standIn()
		env.Nodes = withNode(env.Nodes, scenario.Node{Path: "nvidia-uvm", Major: scenario.NoDriverMajor, Minor: 0})
		return env
	}
	bothBackends(t, mk, []string{"-u", "nobody"}, nil, func(t *testing.T, env *scenario.Env, tr traceRun) {
		commonChecks(t, tr)
		tr.checkStreams(t, "999", 1)
		tr.failing(t, "openat", "/dev/nvidia-uvm", unix.ENXIO)
		tr.requireFinding(t, "node-stale-major", analysis.SeverityError)
		text := tr.findingText("node-stale-major")
		if !strings.Contains(text, "238") || !strings.Contains(text, "c 7 0") {
			t.Errorf("node-stale-major lacks the stale 238 or the fix's c 7 0:\n%s", text)
		}
	})
}

// The driver is not loaded at all: /proc/devices registers no nvidia-uvm,
// and the node's major 238 has no driver (ENXIO).
func TestDriverNotLoaded(t *testing.T) {
	t.Parallel()
	mk := func() *scenario.Env {
		env := standIn()
		env.ProcDevices = strings.Replace(scenario.StandInProcDevices, "  7 nvidia-uvm\n", "", 1)
		env.Nodes = withNode(env.Nodes, scenario.Node{Path: "nvidia-uvm", Major: scenario.NoDriverMajor, Minor: 0})
		return env
	}
	bothBackends(t, mk, []string{"-u", "nobody"}, nil, func(t *testing.T, env *scenario.Env, tr traceRun) {
		commonChecks(t, tr)
		f := tr.rep.Analysis.Failing
		if f == nil || f.Path != "/dev/nvidia-uvm" {
			t.Fatalf("failing call %+v, want one on /dev/nvidia-uvm; verdict %q", f, tr.rep.Analysis.Verdict)
		}
		tr.requireFinding(t, "driver-not-loaded", analysis.SeverityError)
	})
}

func TestNodev(t *testing.T) {
	t.Parallel()
	mk := func() *scenario.Env {
		env := standIn()
		env.NoDev = true
		return env
	}
	bothBackends(t, mk, nil, nil, func(t *testing.T, env *scenario.Env, tr traceRun) {
		commonChecks(t, tr)
		tr.checkStreams(t, "100", 1)
		tr.failing(t, "openat", "/dev/nvidiactl", unix.EACCES)
		tr.requireFinding(t, "nodev", analysis.SeverityError)
	})
}

func TestModeDenied(t *testing.T) {
	t.Parallel()
	mk := func() *scenario.Env {
		env := standIn()
		env.Nodes = withNode(env.Nodes, scenario.Node{Path: "nvidia-uvm", Major: scenario.UVMMajor, Minor: scenario.UVMMinor, Mode: 0o600})
		return env
	}
	lifetimes(t, func(t *testing.T, target []string, runs int) {
		bothBackends(t, mk, []string{"-u", "nobody"}, target, func(t *testing.T, env *scenario.Env, tr traceRun) {
			commonChecks(t, tr)
			tr.checkStreams(t, "999", runs)
			tr.failing(t, "openat", "/dev/nvidia-uvm", unix.EACCES)
			tr.requireFinding(t, "mode-denied", analysis.SeverityError)
		})
	})
}

// The failing open comes from a grandchild: its pid is neither the first
// traced process's nor the second's.
func TestGrandchildFails(t *testing.T) {
	t.Parallel()
	bothBackends(t, denyUVM, nil, []string{"fakecuda", "--fork-depth", "2"}, func(t *testing.T, env *scenario.Env, tr traceRun) {
		commonChecks(t, tr)
		tr.checkStreams(t, "999", 1)
		f := tr.failing(t, "openat", "/dev/nvidia-uvm", unix.EPERM)
		var pids []int
		for _, e := range tr.rep.Events {
			if e.Kind == tracer.KindExec && e.Ret == 0 && !slices.Contains(pids, e.PID) {
				pids = append(pids, e.PID)
			}
		}
		if len(pids) != 3 {
			t.Fatalf("execs by %d processes %v, want 3 (fakecuda, child, grandchild)", len(pids), pids)
		}
		if f.PID != pids[2] || f.PID == pids[0] || f.PID == pids[1] {
			t.Errorf("failing pid %d, want the grandchild %d (processes %v)", f.PID, pids[2], pids)
		}
		tr.requireFinding(t, "cgroup2-denied", analysis.SeverityError)
		exits := 0
		for _, e := range tr.rep.Events {
			if e.Kind == tracer.KindExit && slices.Contains(pids, e.PID) {
				exits++
			}
		}
		if exits < 3 {
			t.Errorf("%d exit events for the 3 processes", exits)
		}
	})
}

// The failing open comes from a second thread: tid != pid.
func TestThreadFails(t *testing.T) {
	t.Parallel()
	bothBackends(t, denyUVM, nil, []string{"fakecuda", "--thread"}, func(t *testing.T, env *scenario.Env, tr traceRun) {
		commonChecks(t, tr)
		tr.checkStreams(t, "999", 1)
		f := tr.failing(t, "openat", "/dev/nvidia-uvm", unix.EPERM)
		if f.TID == f.PID {
			t.Errorf("failing call made by the main thread (tid %d), want the second thread", f.TID)
		}
		if execs := tr.targetExecs(fakecudaBin); len(execs) != 1 || execs[0].PID != f.PID {
			t.Errorf("failing pid %d is not fakecuda's (%+v)", f.PID, execs)
		}
		tr.requireFinding(t, "cgroup2-denied", analysis.SeverityError)
	})
}

// cudatrace exits as its target did.
func TestExitStatusPassthrough(t *testing.T) {
	t.Parallel() // each subtest checks for root and holds its own deadline
	for _, tc := range []struct {
		name   string
		mk     func() *scenario.Env
		target []string
		code   int
		signal int
	}{
		{"exit 7", standIn, []string{"/bin/sh", "-c", "exit 7"}, 7, 0},
		{"sigkill", standIn, []string{"/bin/sh", "-c", "kill -9 $$"}, 137, 9},
		{"fakecuda exit-nonzero", denyUVM, []string{"fakecuda", "--exit-nonzero"}, 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			bothBackends(t, tc.mk, nil, tc.target, func(t *testing.T, env *scenario.Env, tr traceRun) {
				commonChecks(t, tr)
				if tr.code != tc.code {
					t.Errorf("cudatrace exit %d, want %d; stderr:\n%s", tr.code, tc.code, tr.stderr)
				}
				x := tr.rep.Target.Exit
				if x == nil || x.ShellCode() != tc.code || x.Signal != tc.signal {
					t.Errorf("report target exit %+v, want code %d signal %d", x, tc.code, tc.signal)
				}
			})
		})
	}
}

// The failure snapshot must describe the failing process even when it
// exits right after the failure (as a CLI tool like nvidia-smi does). A
// target that fails and exits at once races the snapshot: then the cgroup
// verdict is lost ("target cgroups: no such file or directory") and the
// finding degrades to cgroup-denied-inferred. Several runs make the race
// show.
func TestSnapshotOfExitingTarget(t *testing.T) {
	t.Parallel()
	needBinaries(t)
	for _, b := range backends {
		t.Run(b, func(t *testing.T) {
			t.Parallel()
			privtest.RequireRoot(t)
			env := denyUVM()
			env.Prepare(t)
			for i := range 6 {
				tr := traceIn(t, env, b, nil, fakecuda(env)...)
				if finding(tr.rep, "cgroup2-denied") == nil {
					t.Fatalf("run %d: findings %v, want cgroup2-denied; snapshot unavailable: %q", i, findingIDs(tr.rep), tr.rep.Snapshot.Unavailable)
				}
			}
		})
	}
}

// Without root, auto falls back to ptrace (saying why, in one line), still
// pinpoints the failing call, and marks the cgroup verdict as inferred
// because the device programs cannot be read.
func TestUnprivilegedAutoFallsBackToPtrace(t *testing.T) {
	t.Parallel()
	privtest.RequireRoot(t) // to build the scenario
	needBinaries(t)
	env := denyUVM()
	env.User = "nobody" // cudatrace itself runs as nobody
	env.Prepare(t)
	out := filepath.Join(sharedDir(t), "r.json")
	cmd := env.Command(t, cudatraceBin, "--proc-devices", env.ProcDevicesPath(), "-o", out, "--", fakecudaBin, "--proc-devices", env.ProcDevicesPath())
	r := runBinary(t, cmd)
	if r.code != 0 {
		t.Fatalf("exit %d, want the target's 0; stderr:\n%s", r.code, r.stderr)
	}
	if r.stdout != "cuInit 999\n" {
		t.Errorf("stdout %q", r.stdout)
	}
	first, _, _ := strings.Cut(r.stderr, "\n")
	if !strings.HasPrefix(first, "cudatrace: eBPF unavailable (") || !strings.HasSuffix(first, "; using ptrace") {
		t.Errorf("first stderr line %q does not say why eBPF is not used", first)
	}
	rep, err := report.LoadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	tr := traceRun{result: r, rep: rep, backend: "ptrace"}
	commonChecks(t, tr)
	tr.failing(t, "openat", "/dev/nvidia-uvm", unix.EPERM)
	f := tr.requireFinding(t, "cgroup-denied-inferred", analysis.SeverityError)
	if !f.Inferred {
		t.Error("cgroup-denied-inferred is not marked inferred")
	}
	if fix := f.Fix; !strings.Contains(fix, "c 7:* rwm") {
		t.Errorf("fix %q lacks c 7:* rwm", fix)
	}
	var why string
	for _, u := range rep.Snapshot.Unavailable {
		if strings.HasPrefix(u, "cgroup v2 device programs") {
			why = u
		}
	}
	if why == "" {
		t.Errorf("the report does not say the cgroup programs could not be read: %q", rep.Snapshot.Unavailable)
	} else if strings.Contains(why, "not supported") {
		// The kernel supports BPF_PROG_QUERY; nobody lacks the privilege.
		t.Errorf("unreadable programs blamed on kernel support, not privileges: %q", why)
	}
}

// sharedDir is a temp dir any user can write (t.TempDir is 0700).
func sharedDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "cudatrace-cli-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	return dir
}

// The eBPF backend needs no tracefs (its BTF tracepoints attach through bpf
// links) and mounts nothing: in a private mount namespace where tracefs is
// unreachable, it traces fakecuda's opens, and the namespace's mount table
// is the same while it traces (read by the target) and afterwards.
func TestTracesWithoutTracefs(t *testing.T) {
	t.Parallel()
	privtest.RequireRoot(t)
	needBinaries(t)
	// Runs inside the scenario's namespace: $1 and $2 receive the mount
	// tables before and after; the rest is the cudatrace command line.
	script := `set -e
before=$1 after=$2; shift 2
for m in /sys/kernel/tracing /sys/kernel/debug/tracing /sys/kernel/debug; do umount -l "$m" 2>/dev/null || true; done
if grep -q ' - tracefs ' /proc/self/mountinfo; then echo "tracefs still mounted" >&2; exit 99; fi
cut -d' ' -f5,9 /proc/self/mountinfo > "$before"
rc=0; "$@" || rc=$?
cut -d' ' -f5,9 /proc/self/mountinfo > "$after"
exit $rc`
	env := standIn()
	env.Prepare(t)
	dir := t.TempDir()
	tables := []string{filepath.Join(dir, "before"), filepath.Join(dir, "during"), filepath.Join(dir, "after")}
	out := filepath.Join(dir, "report.json")
	// The target reads the mount table while traced, then execs fakecuda.
	target := append([]string{"/bin/sh", "-c", `cut -d' ' -f5,9 /proc/self/mountinfo > "$0"; exec "$@"`, tables[1]}, fakecuda(env)...)
	argv := append([]string{"/bin/sh", "-c", script, "sh", tables[0], tables[2],
		cudatraceBin, "--backend", "ebpf", "--proc-devices", env.ProcDevicesPath(), "-o", out, "--"}, target...)
	r := runBinary(t, env.Command(t, argv...))
	if r.code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", r.code, r.stderr)
	}
	rep, err := report.LoadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	commonChecks(t, traceRun{result: r, rep: rep, backend: "ebpf"})
	opened := false
	for _, e := range rep.Events {
		opened = opened || e.Kind == tracer.KindOpen && e.Path == "/dev/nvidiactl" && e.Ret >= 0
	}
	if !opened {
		t.Errorf("no successful open of /dev/nvidiactl in the report (%d events)", len(rep.Events))
	}
	var text [3]string
	for i, name := range tables {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		text[i] = string(b)
	}
	for i := 1; i < 3; i++ {
		if strings.Contains(text[i], " tracefs") || text[i] != text[0] {
			t.Errorf("mounts changed:\nbefore:\n%s\n%s:\n%s", text[0], filepath.Base(tables[i]), text[i])
		}
	}
	noOrphanPrograms(t)
}
