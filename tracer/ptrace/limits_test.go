package ptrace

import (
	"slices"
	"strings"
	"testing"

	"github.com/cudatrace/cudatrace/internal/fakelimits"
	"github.com/cudatrace/cudatrace/tracer"
)

// The fd calls a limit fails arrive as the eBPF backend sends them (the
// call and its errno, KindLimit), each one; the successful ones do not,
// nor mmap, which this backend does not stop on.
func TestLaunchLimitCalls(t *testing.T) {
	res, c, _ := runLaunch(t, helperArgv("limits"), []uint32{1})
	if res.Exit == nil || res.Exit.Code != 0 {
		dump(t, c.all())
		t.Fatalf("exit = %+v, want 0", res.Exit)
	}
	count := map[string]int{}
	for _, e := range c.where(func(e *tracer.Event) bool { return e.Kind == tracer.KindLimit }) {
		if e.Path != "" || e.Ret >= 0 {
			t.Errorf("limit event %+v", e)
		}
		count[e.Syscall+" "+e.ErrnoName()]++
	}
	var want []string
	for _, w := range fakelimits.Want {
		if !strings.HasPrefix(w, "mmap ") {
			want = append(want, w)
		}
	}
	var got []string
	for k, n := range count {
		got = append(got, k)
		if n != fakelimits.Rounds {
			t.Errorf("%s: %d events, want %d", k, n, fakelimits.Rounds)
		}
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		dump(t, c.all())
		t.Errorf("limit failures %v, want %v", got, want)
	}
}
