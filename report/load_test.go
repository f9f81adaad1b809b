package report_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cudatrace/cudatrace/analysis"
	"github.com/cudatrace/cudatrace/internal/reportfixture"
	"github.com/cudatrace/cudatrace/render"
	"github.com/cudatrace/cudatrace/report"
	"github.com/cudatrace/cudatrace/tracer"
)

// compatV1 is a schema-1 report written once, by this package's fixture
// lxc-deny-uvm, and never regenerated: every later cudatrace must read it.
const compatV1 = "testdata/compat/v1-lxc-deny-uvm.json"

func TestLoadFrozenV1(t *testing.T) {
	rep, err := report.LoadFile(compatV1)
	if err != nil {
		t.Fatalf("a schema-1 report no longer loads: %v", err)
	}
	// Field by field, so that a renamed JSON tag shows as a zero here
	// rather than as a silently emptier report.
	if rep.Schema != 1 || rep.Tool.Name != "cudatrace" || rep.Tool.Version != "test" {
		t.Errorf("header: schema %d tool %+v", rep.Schema, rep.Tool)
	}
	if len(rep.Target.Argv) != 3 || rep.Target.Argv[0] != "python3" || rep.Target.User != "root" || rep.Target.Exit == nil {
		t.Errorf("target: %+v", rep.Target)
	}
	if tr := rep.Trace; tr.Source != "live" || tr.Backend != "ebpf" || tr.Events != 48 || tr.Stored != 48 || !tr.Complete || tr.Duration == 0 || tr.Started.IsZero() {
		t.Errorf("trace: %+v", tr)
	}
	if len(rep.Events) != 48 || rep.Events[0].Kind != tracer.KindExec || rep.Events[0].Seq != 1 {
		t.Fatalf("events: %d, first %+v", len(rep.Events), rep.Events[0])
	}
	if len(rep.Ioctls) == 0 || rep.Ioctls[0].Dev.Major != 195 || rep.Ioctls[0].Count == 0 {
		t.Errorf("ioctls: %+v", rep.Ioctls)
	}
	s := rep.Snapshot
	if s == nil || s.CgroupV2 == nil || len(s.CgroupV2.Programs) != 1 {
		t.Fatalf("snapshot cgroup v2: %+v", s)
	}
	if p := s.CgroupV2.Programs[0]; p.ID != 57 || p.AttachedTo != "/lxc/200" || len(p.Instructions) == 0 || len(p.Instructions)%8 != 0 {
		t.Errorf("program: id %d attached %q, %d instruction bytes", p.ID, p.AttachedTo, len(p.Instructions))
	}
	if maj, ok := s.MajorOf("nvidia-uvm"); !ok || maj != 238 {
		t.Errorf("proc_devices: nvidia-uvm = %d, %v", maj, ok)
	}
	if n := s.Node("/dev/nvidia-uvm"); n == nil || n.Major != 238 || n.Mode != 0o666 {
		t.Errorf("node: %+v", n)
	}
	if s.Container.ProxmoxCTID != "200" {
		t.Errorf("container: %+v", s.Container)
	}
	if f := rep.Analysis.Failing; f == nil || f.Path != "/dev/nvidia-uvm" || f.ErrnoName() != "EPERM" {
		t.Errorf("stored failing call: %+v", f)
	}

	// Today's rules, on the old file, still pinpoint the same call for the
	// same reason (the offline `cudatrace report` path).
	a := analysis.Analyze(rep.Events, rep.Snapshot)
	if a.Failing == nil || a.Failing.Seq != rep.Analysis.Failing.Seq {
		t.Fatalf("re-analysis of the v1 report: failing %+v, stored %+v", a.Failing, rep.Analysis.Failing)
	}
	if !hasFinding(a, "cgroup2-denied") {
		t.Errorf("re-analysis of the v1 report lost cgroup2-denied: %s", a.Verdict)
	}
	for _, f := range []render.Format{render.FormatText, render.FormatMarkdown, render.FormatJSON} {
		var out bytes.Buffer
		if err := render.Report(&out, rep, f, render.Options{}); err != nil || out.Len() == 0 {
			t.Errorf("render %s: %v (%d bytes)", f, err, out.Len())
		}
	}
}

func hasFinding(a analysis.Result, id string) bool {
	for _, f := range a.Findings {
		if f.ID == id {
			return true
		}
	}
	return false
}

func TestLoadBadInput(t *testing.T) {
	good, err := os.ReadFile(compatV1)
	if err != nil {
		t.Fatal(err)
	}
	garbage := make([]byte, 4096)
	for i := range garbage {
		garbage[i] = byte(i*131 + i/7)
	}
	cases := []struct {
		name string
		in   []byte
		is   error  // errors.Is target, when set
		says string // the message holds this
	}{
		{"empty", nil, report.ErrEmpty, "empty"},
		{"whitespace", []byte(" \n\t\n"), report.ErrEmpty, "empty"},
		{"truncated half", good[:len(good)/2], report.ErrCorrupt, "truncated"},
		{"truncated after the header", good[:200], report.ErrCorrupt, "truncated"},
		{"truncated one byte short", bytes.TrimSpace(good)[:len(bytes.TrimSpace(good))-1], report.ErrCorrupt, "truncated"},
		{"binary", garbage, report.ErrCorrupt, "corrupt or not a cudatrace report"},
		{"elf header", append([]byte("\x7fELF\x02\x01\x01"), garbage[:64]...), report.ErrCorrupt, "corrupt or not a cudatrace report"},
		{"no schema", []byte(`{"tool":{"name":"cudatrace","version":"1"},"events":[]}`), report.ErrCorrupt, "schema"},
		{"no tool name", []byte(`{"schema":1,"events":[]}`), report.ErrCorrupt, "schema"},
		{"another tool", []byte(`{"schema":1,"tool":{"name":"tracee"}}`), report.ErrCorrupt, "corrupt or not a cudatrace report"},
		{"schema 0", []byte(`{"schema":0,"tool":{"name":"cudatrace"}}`), report.ErrCorrupt, "schema 0"},
		{"schema negative", []byte(`{"schema":-3,"tool":{"name":"cudatrace"}}`), report.ErrCorrupt, "schema -3"},
		{"schema a string", []byte(`{"schema":"1","tool":{"name":"cudatrace"}}`), report.ErrCorrupt, "corrupt or not a cudatrace report"},
		{"json array", []byte(`[1,2,3]`), report.ErrCorrupt, "corrupt or not a cudatrace report"},
		{"json null", []byte(`null`), report.ErrCorrupt, "corrupt or not a cudatrace report"},
		{"events of the wrong type", []byte(`{"schema":1,"tool":{"name":"cudatrace"},"events":"x"}`), report.ErrCorrupt, "events"},
		{"a strace log", []byte("639 14:58:43.866763 openat(AT_FDCWD, \"/dev/nvidia-uvm\", O_RDWR) = -1 EPERM\n"), report.ErrCorrupt, "corrupt or not a cudatrace report"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rep, err := report.Load(bytes.NewReader(c.in))
			if err == nil {
				t.Fatalf("loaded %+v", rep)
			}
			if rep != nil {
				t.Errorf("a report came back with the error %v", err)
			}
			if !errors.Is(err, c.is) {
				t.Errorf("error %q is not %v", err, c.is)
			}
			checkOneLine(t, err)
			if !strings.Contains(err.Error(), c.says) {
				t.Errorf("error %q does not say %q", err, c.says)
			}
		})
	}
}

func TestLoadNewerSchema(t *testing.T) {
	good, err := os.ReadFile(compatV1)
	if err != nil {
		t.Fatal(err)
	}
	newer := bytes.Replace(good, []byte(`"schema": 1,`), []byte(`"schema": 2,`), 1)
	if bytes.Equal(newer, good) {
		t.Fatal("the fixture has no schema field to bump")
	}
	_, err = report.Load(bytes.NewReader(newer))
	var ve *report.VersionError
	if !errors.As(err, &ve) {
		t.Fatalf("schema 2: got %v, want a *VersionError", err)
	}
	if ve.Schema != 2 {
		t.Errorf("VersionError.Schema = %d", ve.Schema)
	}
	checkOneLine(t, err)
	for _, want := range []string{"schema 2", "reads up to 1", "upgrade cudatrace"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q lacks %q", err, want)
		}
	}
	// A newer report is not called corrupt: it is fine, just newer.
	if errors.Is(err, report.ErrCorrupt) {
		t.Errorf("%v: a newer schema reported as corrupt", err)
	}
}

func TestLoadFileMissing(t *testing.T) {
	_, err := report.LoadFile(filepath.Join(t.TempDir(), "nope.json"))
	if !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("got %v, want ErrNotExist", err)
	}
	checkOneLine(t, err)
}

// Unknown fields are what a later minor version adds; readers skip them.
func TestLoadIgnoresUnknownFields(t *testing.T) {
	rep, err := report.Load(strings.NewReader(`{"schema":1,"tool":{"name":"cudatrace","version":"9"},"future":{"x":[1]},"trace":{"events":3,"dropped":1,"complete":false,"new_field":true}}`))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Trace.Events != 3 || rep.Trace.Dropped != 1 || rep.Trace.Complete {
		t.Errorf("trace: %+v", rep.Trace)
	}
}

func checkOneLine(t *testing.T, err error) {
	t.Helper()
	if msg := err.Error(); strings.Contains(msg, "\n") || msg == "" {
		t.Errorf("error is not one line: %q", msg)
	}
}

func FuzzLoad(f *testing.F) {
	// Small seeds: the mutator slows down with input size, and a full
	// report adds nothing a few events around the failing call do not.
	for _, fx := range reportfixture.All {
		rep := reportfixture.Build(f, fx)
		if len(rep.Events) > 12 {
			at := 0
			if rep.Analysis.Failing != nil {
				for i, e := range rep.Events {
					if e.Seq == rep.Analysis.Failing.Seq {
						at = i
					}
				}
			}
			lo := max(0, at-6)
			rep.Events = rep.Events[lo:min(len(rep.Events), lo+12)]
		}
		b := reportfixture.MustJSON(f, rep)
		f.Add(b)
		f.Add(b[:len(b)/2])
	}
	if b, err := os.ReadFile(compatV1); err == nil {
		f.Add(b)
	} else {
		f.Fatal(err)
	}
	f.Add([]byte(`{"schema":1,"tool":{"name":"cudatrace"}}`))
	f.Add([]byte(`{"schema":1,"tool":{"name":"cudatrace"},"trace":{"dropped":5},"events":[{"seq":1,"kind":"open","path":"/dev/nvidia-uvm","ret":-1}],"analysis":{"failing":{"seq":1,"kind":"open","ret":-1}}}`))
	f.Add([]byte(`{"schema":2,"tool":{"name":"cudatrace"}}`))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		rep, err := report.Load(bytes.NewReader(data))
		if err != nil {
			if rep != nil {
				t.Fatalf("report and error %v", err)
			}
			if msg := err.Error(); strings.Contains(msg, "\n") {
				t.Fatalf("multi-line error %q", msg)
			}
			return
		}
		if rep.Schema < 1 || rep.Schema > report.SchemaVersion || rep.Tool.Name != "cudatrace" {
			t.Fatalf("accepted schema %d tool %q", rep.Schema, rep.Tool.Name)
		}
		// What `cudatrace report` does next must not panic either.
		rep.Analysis = analysis.Analyze(rep.Events, rep.Snapshot)
		for _, fm := range []render.Format{render.FormatText, render.FormatMarkdown, render.FormatJSON} {
			if err := render.Report(&bytes.Buffer{}, rep, fm, render.Options{Width: 60}); err != nil {
				t.Fatalf("render %s: %v", fm, err)
			}
		}
	})
}
