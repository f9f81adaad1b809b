package watch

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cudatrace/cudatrace/diagnose"
	"github.com/cudatrace/cudatrace/internal/privtest"
	"github.com/cudatrace/cudatrace/snapshot"
	"github.com/cudatrace/cudatrace/tracer"
)

// fakeBackend replays a host-wide script: events of several processes
// interleaved, each process's folded counts before its exit, live stats
// at given positions; then, with block, it waits for ctx as the real
// backend does until SIGTERM.
type fakeBackend struct {
	events []tracer.Event
	folded map[int][]tracer.Folded
	stats  map[int]tracer.LiveStats // called before events[i]
	// before is called before events[i] is delivered, on the sink's
	// goroutine (tests look at the watcher's state there).
	before func(i int, w *watcher)
	block  bool
	res    tracer.Result
	spec   tracer.Spec
}

func (f *fakeBackend) Name() string { return "ebpf" }

func (f *fakeBackend) Run(ctx context.Context, spec tracer.Spec, sink tracer.Sink) (*tracer.Result, error) {
	f.spec = spec
	for i := range f.events {
		if s, ok := f.stats[i]; ok && spec.Stats != nil {
			spec.Stats(s)
		}
		if f.before != nil {
			f.before(i, sink.(*watcher))
		}
		e := f.events[i].Copy()
		e.Seq = uint64(i + 1)
		e.Time = time.Duration(i+1) * time.Millisecond
		if e.Kind == tracer.KindExit {
			if fs, ok := sink.(tracer.FoldSink); ok && f.folded[e.PID] != nil {
				fs.Folded(e.PID, f.folded[e.PID])
			}
		}
		sink.Event(&e)
	}
	if f.block {
		<-ctx.Done()
	}
	res := f.res
	res.Backend = "ebpf"
	return &res, nil
}

var (
	ctlDev = &tracer.Dev{Major: 195, Minor: 255}
	uvmDev = &tracer.Dev{Major: 238, Minor: 0}
)

// Scripted processes: what each does, as the backend would stream it.
func missingUVM(pid int, comm string) []tracer.Event {
	return []tracer.Event{
		{PID: pid, TID: pid, Comm: comm, Kind: tracer.KindOpen, Syscall: "openat", Path: "/dev/nvidiactl", Ret: 3, Dev: ctlDev},
		{PID: pid, TID: pid, Comm: comm, Kind: tracer.KindOpen, Syscall: "openat", Path: "/dev/nvidia-uvm", Ret: -2},
		{PID: pid, TID: pid, Comm: comm, Kind: tracer.KindAPI, Func: "cuInit", Path: "/usr/lib/libcuda.so.1", Ret: 999},
	}
}

func deniedCtl(pid int, comm string) []tracer.Event {
	return []tracer.Event{
		{PID: pid, TID: pid, Comm: comm, Kind: tracer.KindOpen, Syscall: "openat", Path: "/dev/nvidiactl", Ret: -1},
		{PID: pid, TID: pid, Comm: comm, Kind: tracer.KindAPI, Func: "cuInit", Path: "/usr/lib/libcuda.so.1", Ret: 999},
	}
}

func healthyStart(pid int, comm string) []tracer.Event {
	return []tracer.Event{
		{PID: pid, TID: pid, Comm: comm, Kind: tracer.KindOpen, Syscall: "openat", Path: "/dev/nvidiactl", Ret: 3, Dev: ctlDev},
		{PID: pid, TID: pid, Comm: comm, Kind: tracer.KindOpen, Syscall: "openat", Path: "/dev/nvidia-uvm", Ret: 4, Dev: uvmDev},
		// A failed ioctl the analysis knows to be harmless: it triggers
		// the snapshot but is no diagnosis.
		{PID: pid, TID: pid, Comm: comm, Kind: tracer.KindIoctl, Syscall: "ioctl", Dev: ctlDev, FD: 3, Request: 0x1234, Ret: -25},
		{PID: pid, TID: pid, Comm: comm, Kind: tracer.KindAPI, Func: "cuInit", Path: "/usr/lib/libcuda.so.1", Ret: 0},
	}
}

func exitOf(pid int, code int) tracer.Event {
	return tracer.Event{PID: pid, TID: pid, Kind: tracer.KindExit, Syscall: "exit", ExitCode: code}
}

// interleave merges the processes' event lists round-robin, as a busy
// host's stream does.
func interleave(lists ...[]tracer.Event) []tracer.Event {
	var out []tracer.Event
	for i := 0; ; i++ {
		more := false
		for _, l := range lists {
			if i < len(l) {
				out = append(out, l[i])
				more = true
			}
		}
		if !more {
			return out
		}
	}
}

// fakeHost is the system the sessions read: each PID's cgroup and the
// snapshot of it.
type fakeHost struct {
	mu      sync.Mutex
	cgroups map[int]string
	argv    map[int][]string // /proc's argv, where set (else python3 train.py PID)
	collect []int            // the PIDs snapshotted, in order
}

func (h *fakeHost) identity(pid int) (snapshot.Identity, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	cg, ok := h.cgroups[pid]
	if !ok {
		return snapshot.Identity{}, fmt.Errorf("no process %d", pid)
	}
	argv := h.argv[pid]
	if argv == nil {
		argv = []string{"python3", "train.py", fmt.Sprint(pid)}
	}
	return snapshot.Identity{Cgroup: cg, UID: -1, Argv: argv}, nil
}

func (h *fakeHost) system() *diagnose.System {
	return &diagnose.System{
		Collect: func(o snapshot.Options) *snapshot.Snapshot {
			h.mu.Lock()
			h.collect = append(h.collect, o.PID)
			cg := h.cgroups[o.PID]
			h.mu.Unlock()
			return &snapshot.Snapshot{
				Process:     snapshot.Process{PID: o.PID, Comm: "python3", UID: 1000, User: "alice"},
				Driver:      snapshot.Driver{Loaded: true},
				ProcDevices: []snapshot.DriverMajor{{Major: 195, Name: "nvidia-frontend"}, {Major: 238, Name: "nvidia-uvm"}},
				Nodes: []snapshot.Node{
					{Path: "/dev/nvidiactl", Exists: true, Type: "c", Major: 195, Minor: 255, Mode: 0o666},
					{Path: "/dev/nvidia-uvm", Exists: o.PID%2 == 1, Type: "c", Major: 238, Mode: 0o666},
				},
				Container: snapshot.ContainerFromCgroupPath(cg),
			}
		},
		TargetEnv:      func(int) (map[string]string, error) { return map[string]string{}, nil },
		TargetIdentity: h.identity,
	}
}

func (h *fakeHost) snapshotted() []int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]int(nil), h.collect...)
}

const (
	podUID = "5e3c1a2b-7d4f-4e1a-9b2c-0d1e2f3a4b5c"
	ctrID  = "8a7e2c1d0f9b8a7e6d5c4b3a2f1e0d9c8b7a6f5e4d3c2b1a0f9e8d7c6b5a4f3e"
	podCg  = "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod5e3c1a2b_7d4f_4e1a_9b2c_0d1e2f3a4b5c.slice/cri-containerd-" + ctrID + ".scope"
)

// watchWith runs a watcher over b to its end and returns its stdout and
// summary; the test's deadline bounds it.
func watchWith(t *testing.T, b *fakeBackend, h *fakeHost, tune func(*Options)) (*watcher, *Summary, string) {
	t.Helper()
	ctx := privtest.Deadline(t)
	var out bytes.Buffer
	o := Options{Backend: b, Out: &out, JSON: true, Host: "gpu-node-7", Version: "v-test",
		System: h.system(), identity: h.identity}
	if tune != nil {
		tune(&o)
	}
	w := newWatcher(o)
	sum, err := w.run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return w, sum, out.String()
}

func parseLines(t *testing.T, out string) []Line {
	t.Helper()
	var lines []Line
	for _, s := range strings.Split(strings.TrimSpace(out), "\n") {
		if s == "" {
			continue
		}
		var l Line
		dec := json.NewDecoder(strings.NewReader(s))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&l); err != nil {
			t.Fatalf("not a diagnosis line: %q: %v", s, err)
		}
		lines = append(lines, l)
	}
	return lines
}

func byPID(lines []Line) map[int][]Line {
	m := map[int][]Line{}
	for _, l := range lines {
		m[l.PID] = append(m[l.PID], l)
	}
	return m
}
