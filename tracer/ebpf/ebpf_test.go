package ebpftrace

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cudatrace/cudatrace/internal/privtest"
	"github.com/cudatrace/cudatrace/tracer"
	"github.com/cudatrace/cudatrace/tracer/launch"
)

func TestMain(m *testing.M) {
	launch.RunLoaderIfRequested()
	os.Exit(m.Run())
}

// recorder is a Sink that keeps everything.
type recorder struct {
	mu     sync.Mutex
	events []*tracer.Event
}

func (r *recorder) Event(e *tracer.Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

func (r *recorder) find(match func(*tracer.Event) bool) []*tracer.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*tracer.Event
	for _, e := range r.events {
		if match(e) {
			out = append(out, e)
		}
	}
	return out
}

func (r *recorder) dump() string {
	var b strings.Builder
	for _, e := range r.events {
		fmt.Fprintf(&b, "  %+v\n", *e)
	}
	return b.String()
}

// fakeNode creates a character device under /dev whose name starts with
// /dev/nvidia (so the path filters apply), here c 1:3 like /dev/null.
func fakeNode(t *testing.T, stem string) string {
	t.Helper()
	p := fmt.Sprintf("/dev/%s-cudatrace-test-%08x", stem, rand.Uint32())
	if err := unix.Mknod(p, unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
		t.Fatalf("mknod %s: %v", p, err)
	}
	t.Cleanup(func() { os.Remove(p) })
	return p
}

func traceCmd(t *testing.T, spec tracer.Spec, script string) (*tracer.Result, *recorder) {
	t.Helper()
	privtest.RequireRoot(t)
	spec.Argv = []string{"/bin/sh", "-c", script}
	if spec.DeviceMajors == nil {
		spec.DeviceMajors = []uint32{1}
	}
	rec := &recorder{}
	res, err := New().Run(context.Background(), spec, rec)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return res, rec
}

func TestSmoke(t *testing.T) {
	node := fakeNode(t, "nvidiactl")
	res, rec := traceCmd(t, tracer.Spec{}, fmt.Sprintf("exec 3<>%s; : < /dev/nvidia-uvm-missing-x; exit 7", node))
	t.Logf("result %+v exit %+v\n%s", res, res.Exit, rec.dump())
	_ = filepath.Join
	_ = slices.Contains[[]int]
}
