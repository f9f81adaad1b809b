package diagnose

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/cudatrace/cudatrace/internal/privtest"
	"github.com/cudatrace/cudatrace/tracer"
)

// unloadable is an eBPF backend whose probe passed but whose programs do
// not load (as on a kernel older than they need).
type unloadable struct{ runs int }

func (*unloadable) Name() string { return "ebpf" }

func (u *unloadable) Run(context.Context, tracer.Spec, tracer.Sink) (*tracer.Result, error) {
	u.runs++
	return nil, fmt.Errorf("BPF not supported: kfunc \"x\": %w", tracer.ErrUnavailable)
}

func TestAutoFallsBackWhenEBPFCannotLoad(t *testing.T) {
	ctx := privtest.Deadline(t)
	spec := tracer.Spec{Argv: []string{"/bin/sh", "-c", "exec 3</dev/null; exit 3"}, DeviceMajors: []uint32{1}}
	untouched := func() bool { return true }

	var notices []string
	notice := func(m string) { notices = append(notices, m) }
	var opens int
	sink := tracer.SinkFunc(func(e *tracer.Event) {
		if e.Kind == tracer.KindOpen && e.Path == "/dev/null" {
			opens++
		}
	})
	res, err := runBackend(ctx, &unloadable{}, true, spec, sink, untouched, notice)
	if err != nil {
		t.Fatalf("auto: %v", err)
	}
	if res.Backend != "ptrace" || res.Exit == nil || res.Exit.Code != 3 || opens != 1 {
		t.Errorf("auto: backend %s, exit %+v, %d opens of /dev/null; want ptrace, 3, 1", res.Backend, res.Exit, opens)
	}
	if want := "eBPF unavailable (BPF not supported: kfunc \"x\": backend unavailable); using ptrace"; len(notices) != 1 || notices[0] != want {
		t.Errorf("notices %q, want [%q]", notices, want)
	}

	// --backend ebpf, or a trace that already saw calls: the error stands.
	for name, tc := range map[string]struct {
		fallback  bool
		untouched func() bool
	}{
		"explicit ebpf": {false, untouched},
		"calls seen":    {true, func() bool { return false }},
	} {
		u := &unloadable{}
		notices = nil
		if _, err := runBackend(ctx, u, tc.fallback, spec, sink, tc.untouched, notice); err == nil || !strings.Contains(err.Error(), "kfunc") || u.runs != 1 || len(notices) != 0 {
			t.Errorf("%s: err %v, %d runs, stderr %q; want the load error, one run, nothing printed", name, err, u.runs, notices)
		}
	}
}
