package record

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/cudatrace/cudatrace/tracer"
	"github.com/cudatrace/cudatrace/tracer/stracelog"
)

func ioctlEv(seq uint64, pid, fd int, dev tracer.Dev, req uint32, ret int64) *tracer.Event {
	d := dev
	return &tracer.Event{Seq: seq, PID: pid, TID: pid, Comm: "python3", Kind: tracer.KindIoctl, Syscall: "ioctl",
		FD: fd, Request: req, Dev: &d, Ret: ret, Arg: []byte{1, 2, 3, 4}}
}

func TestRecorderAggregatesIoctls(t *testing.T) {
	ctl := tracer.Dev{Major: 195, Minor: 255}
	uvm := tracer.Dev{Major: 238, Minor: 0}
	const control, uvmInit = 0xc020462a, 0x30000001
	r := New()
	seq := uint64(0)
	next := func() uint64 { seq++; return seq }

	// Failures first, so that they cannot use up the sample of successes.
	var failed []uint64
	for range 3 {
		s := next()
		failed = append(failed, s)
		r.Event(ioctlEv(s, 42, 8, ctl, control, -22))
	}
	for range 20 {
		r.Event(ioctlEv(next(), 42, 8, ctl, control, 0))
	}
	s := next()
	failed = append(failed, s)
	r.Event(ioctlEv(s, 42, 8, ctl, control, -1)) // after the sample is full
	for range 5 {
		r.Event(ioctlEv(next(), 42, 9, uvm, uvmInit, 0)) // another site
	}
	for range 10 {
		r.Event(ioctlEv(next(), 43, 8, ctl, control, 0)) // another process, same request
	}
	r.Event(&tracer.Event{Seq: next(), PID: 42, TID: 42, Kind: tracer.KindOpen, Path: "/dev/nvidiactl", Ret: 8})

	if r.Seen != seq {
		t.Errorf("Seen = %d, want %d", r.Seen, seq)
	}
	if r.Overflow != 0 {
		t.Errorf("Overflow = %d", r.Overflow)
	}
	type key struct {
		pid int
		req uint32
		ok  bool
	}
	stored := map[key]int{}
	storedSeq := map[uint64]bool{}
	for _, e := range r.Events() {
		storedSeq[e.Seq] = true
		if e.Kind == tracer.KindIoctl {
			stored[key{e.PID, e.Request, !e.Failed()}]++
		}
	}
	want := map[key]int{
		{42, control, true}: 8, {42, control, false}: 4,
		{42, uvmInit, true}: 5,
		{43, control, true}: 8,
	}
	for k, n := range want {
		if stored[k] != n {
			t.Errorf("stored %+v: %d, want %d", k, stored[k], n)
		}
	}
	for _, s := range failed {
		if !storedSeq[s] {
			t.Errorf("failed ioctl %d not stored", s)
		}
	}
	if !storedSeq[seq] {
		t.Error("the open after the ioctls was not stored")
	}
	for i := 1; i < len(r.Events()); i++ {
		if r.Events()[i].Seq <= r.Events()[i-1].Seq {
			t.Fatalf("stored events out of order at %d", i)
		}
	}

	got := r.Ioctls()
	wantSum := []IoctlSummary{
		{PID: 42, Dev: ctl, Request: control, Count: 24, Failed: 4},
		{PID: 42, Dev: uvm, Request: uvmInit, Count: 5},
		{PID: 43, Dev: ctl, Request: control, Count: 10},
	}
	if fmt.Sprint(got) != fmt.Sprint(wantSum) {
		t.Errorf("Ioctls() = %+v\nwant %+v", got, wantSum)
	}
}

// An ioctl whose fd's device is unknown (fd -1 after a failed open) is a
// site of its own, not a crash on the nil Dev.
func TestRecorderIoctlWithoutDevice(t *testing.T) {
	r := New()
	r.Event(&tracer.Event{Seq: 1, PID: 7, Kind: tracer.KindIoctl, FD: -1, Request: 0x30000002, Ret: -9})
	if len(r.Events()) != 1 || r.Events()[0].Dev != nil {
		t.Fatalf("events %+v", r.Events())
	}
	if s := r.Ioctls(); len(s) != 1 || s[0].Failed != 1 || s[0].Dev != (tracer.Dev{}) {
		t.Errorf("summary %+v", s)
	}
}

func TestRecorderOverflowIsCounted(t *testing.T) {
	r := New()
	const extra = 7
	for i := range maxStored + extra {
		// 10,000 sites (fewer than maxSites), 20 stats each: all stored.
		r.Event(&tracer.Event{Seq: uint64(i + 1), PID: 1, Kind: tracer.KindStat, Path: "/dev/nvidia" + strconv.Itoa(i%10_000)})
	}
	// Beyond the cap, ioctls are still summarised exactly, and the first
	// failure of a new site is still stored.
	for i := range 3 {
		r.Event(ioctlEv(uint64(maxStored+extra+i+1), 1, 8, tracer.Dev{Major: 195, Minor: 255}, 0xc020462a, -22))
	}
	evs := r.Events()
	if len(evs) != maxStored+1 {
		t.Errorf("stored %d, want the cap %d and the first failed ioctl", len(evs), maxStored)
	}
	if r.Overflow != extra+2 {
		t.Errorf("Overflow = %d, want %d", r.Overflow, extra+2)
	}
	if r.Seen != maxStored+extra+3 {
		t.Errorf("Seen = %d", r.Seen)
	}
	if s := r.Ioctls(); len(s) != 1 || s[0].Count != 3 || s[0].Failed != 3 {
		t.Errorf("ioctl summary past the cap: %+v", s)
	}
	if e := evs[maxStored-1]; e.Seq != maxStored {
		t.Errorf("kept up to seq %d: the first events must be the ones kept", e.Seq)
	}
	if e := evs[maxStored]; e.Kind != tracer.KindIoctl || e.Seq != maxStored+extra+1 {
		t.Errorf("past the cap: %+v, want the first failed ioctl", e)
	}
}

// Past the cap, the calls a verdict rests on (failed opens, execs, exits,
// API returns) are still stored, up to a reserve that is itself bounded.
func TestRecorderKeepsDecisiveCallsPastTheCap(t *testing.T) {
	r := New()
	seq := uint64(0)
	ev := func(e tracer.Event) *tracer.Event { seq++; e.Seq, e.PID, e.TID = seq, 3, 3; return &e }
	for i := range maxStored {
		r.Event(ev(tracer.Event{Kind: tracer.KindStat, Path: "/dev/nvidia" + strconv.Itoa(i)}))
	}
	r.Event(ev(tracer.Event{Kind: tracer.KindStat, Path: "/dev/nvidia-extra"}))
	r.Event(ev(tracer.Event{Kind: tracer.KindOpen, Path: "/dev/nvidia-uvm", Ret: -1}))
	r.Event(ev(tracer.Event{Kind: tracer.KindAPI, Func: "cuInit", Ret: 999}))
	r.Event(ev(tracer.Event{Kind: tracer.KindExit}))
	evs := r.Events()
	var kinds []tracer.Kind
	for _, e := range evs[maxStored:] {
		kinds = append(kinds, e.Kind)
	}
	if fmt.Sprint(kinds) != "[open api exit]" || r.Overflow != 1 {
		t.Errorf("past the cap stored %v (overflow %d), want [open api exit] and the stat counted", kinds, r.Overflow)
	}
	for i := range maxReserved + 10 {
		r.Event(ev(tracer.Event{Kind: tracer.KindOpen, Path: "/dev/nvidia-caps/x" + strconv.Itoa(i), Ret: -2}))
	}
	if n := len(r.Events()); n != maxStored+maxReserved {
		t.Errorf("stored %d, want at most %d", n, maxStored+maxReserved)
	}
	if r.Overflow != 1+13 {
		t.Errorf("Overflow = %d, want %d", r.Overflow, 1+13)
	}
}

// A target choosing a new ioctl request number (or path) for every call
// cannot grow the recorder's per-site state without bound.
func TestRecorderSitesAreBounded(t *testing.T) {
	r := New()
	for i := range 3 * maxSites {
		r.Event(ioctlEv(uint64(i+1), 4, 8, tracer.Dev{Major: 195, Minor: 255}, uint32(i), -25))
		r.Event(&tracer.Event{Seq: uint64(i + 1), PID: 4, Kind: tracer.KindStat, Path: "/dev/nvidia-x" + strconv.Itoa(i)})
	}
	if len(r.ioctls) != maxSites || len(r.sites) != maxSites {
		t.Errorf("following %d ioctl sites and %d call sites, want at most %d", len(r.ioctls), len(r.sites), maxSites)
	}
	if n := len(r.Events()); n != 6*maxSites {
		t.Errorf("stored %d events, want all %d (under the cap)", n, 6*maxSites)
	}
}

// The issue-12 run: a million failing ioctls on one site, then the failed
// open that decides the verdict. The ioctls are folded to their first and
// last few with exact counts, and the open is kept.
func TestRecorderFoldsRepeatedFailures(t *testing.T) {
	ctl := tracer.Dev{Major: 195, Minor: 255}
	const n = 1_000_000
	r := New()
	e := ioctlEv(0, 42, 8, ctl, 0xc020462a, -22)
	for i := range n {
		e.Seq = uint64(i + 1)
		e.Arg[0] = byte(i)
		r.Event(e)
	}
	r.Event(&tracer.Event{Seq: n + 1, PID: 42, TID: 42, Kind: tracer.KindOpen, Path: "/dev/nvidia-uvm", Ret: -1})

	evs := r.Events()
	var seqs []uint64
	for _, e := range evs {
		seqs = append(seqs, e.Seq)
	}
	want := []uint64{1, 2, 3, 4, 5, 6, 7, 8, n - 3, n - 2, n - 1, n, n + 1}
	if fmt.Sprint(seqs) != fmt.Sprint(want) {
		t.Fatalf("stored seqs %v, want %v", seqs, want)
	}
	if last := evs[len(evs)-2]; last.Arg[0] != byte((n-1)%256) || last.Request != 0xc020462a || last.Dev.Major != 195 {
		t.Errorf("the last failed ioctl kept is not the last one seen: %+v", last)
	}
	if r.Overflow != 0 || r.Seen != n+1 {
		t.Errorf("overflow %d seen %d", r.Overflow, r.Seen)
	}
	if s := r.Ioctls(); len(s) != 1 || s[0].Count != n || s[0].Failed != n {
		t.Errorf("ioctl summary %+v, want %d failed of %d", s, n, n)
	}
	f := r.Folded()
	if len(f) != 1 || f[0].Kind != tracer.KindIoctl || f[0].Calls != n || f[0].Errno != 22 ||
		f[0].Dev == nil || *f[0].Dev != ctl || f[0].Request != 0xc020462a || f[0].PID != 42 {
		t.Errorf("folded %+v, want the one ioctl site with %d EINVAL calls", f, n)
	}
}

// Tails of interleaved sites come back in arrival order with the rest.
func TestRecorderTailsInOrder(t *testing.T) {
	r := New()
	for i := range 100 {
		seq := uint64(2*i + 1)
		r.Event(&tracer.Event{Seq: seq, PID: 5, Kind: tracer.KindOpen, Path: "/dev/nvidia0", Ret: -13})
		r.Event(&tracer.Event{Seq: seq + 1, PID: 5, Kind: tracer.KindStat, Path: "/dev/nvidia0", Ret: -2})
	}
	evs := r.Events()
	if len(evs) != 2*(FailSamplePerSite+FailTailPerSite) {
		t.Fatalf("stored %d", len(evs))
	}
	for i := 1; i < len(evs); i++ {
		if evs[i].Seq <= evs[i-1].Seq {
			t.Fatalf("out of order at %d: %d after %d", i, evs[i].Seq, evs[i-1].Seq)
		}
	}
	if evs[len(evs)-1].Seq != 200 || evs[len(evs)-2].Seq != 199 {
		t.Errorf("last stored %d, %d, want 199, 200", evs[len(evs)-2].Seq, evs[len(evs)-1].Seq)
	}
	f := r.Folded()
	if len(f) != 2 || f[0].Errno != 13 || f[0].Calls != 100 || f[1].Errno != 2 || f[1].Kind != tracer.KindStat {
		t.Errorf("folded %+v", f)
	}
}

// A process reopening one node in a loop is stored SamplePerSite times and counted.
func TestRecorderFoldsRepeatedCalls(t *testing.T) {
	r := New()
	for i := range 1000 {
		r.Event(&tracer.Event{Seq: uint64(i + 1), PID: 7, Kind: tracer.KindOpen, Path: "/dev/nvidiactl", Ret: 3})
	}
	r.Event(&tracer.Event{Seq: 1001, PID: 7, Kind: tracer.KindOpen, Path: "/dev/nvidiactl", Ret: -1})
	if len(r.Events()) != SamplePerSite+1 {
		t.Fatalf("stored %d events, want %d samples plus the failure", len(r.Events()), SamplePerSite)
	}
	if last := r.Events()[len(r.Events())-1]; last.Seq != 1001 || !last.Failed() {
		t.Errorf("the failed open must always be stored, last = %+v", last)
	}
	f := r.Folded()
	if len(f) != 1 || f[0].Calls != 1000 || f[0].Path != "/dev/nvidiactl" || f[0].PID != 7 {
		t.Errorf("folded = %+v, want 1000 calls of /dev/nvidiactl by 7", f)
	}
}

// A backend that folds in the kernel (first N per site sent, the rest
// counted; paths too long for its key sent every time) leaves the recorder
// exactly where the whole stream would, the order of the folded sites
// included.
func TestRecorderAddFoldedMatchesWholeStream(t *testing.T) {
	ctl := tracer.Dev{Major: 195, Minor: 255}
	const control = 0xc020462a
	long := "/proc/driver/nvidia/gpus/0000:00:1e.0/a-path-longer-than-the-kernel-fold-key"
	open := func(seq uint64, path string) *tracer.Event {
		return &tracer.Event{Seq: seq, PID: 7, TID: 7, Kind: tracer.KindOpen, Syscall: "openat", Path: path, Ret: 4}
	}
	// First seen: nvidiactl, long, nvidia0; past 32 calls: nvidia0 first.
	var stream []*tracer.Event
	add := func(e *tracer.Event) { stream = append(stream, e) }
	add(open(1, "/dev/nvidiactl"))
	add(open(2, long))
	for range 40 {
		add(open(uint64(len(stream)+1), "/dev/nvidia0"))
	}
	for i := range 100 {
		seq := uint64(len(stream) + 1)
		if i%10 == 0 {
			add(ioctlEv(seq, 7, 4, ctl, control, -22)) // failures are always sent
		} else {
			add(ioctlEv(seq, 7, 4, ctl, control, 0))
		}
		add(open(seq+1, "/dev/nvidiactl"))
		add(open(seq+2, long))
	}
	whole := New()
	for _, e := range stream {
		whole.Event(e)
	}

	folded := New()
	sent := map[string]uint64{}
	var kernel []tracer.Folded
	count := func(f tracer.Folded) {
		for i := range kernel {
			if kernel[i].Kind == f.Kind && kernel[i].Path == f.Path {
				kernel[i].Count++
				return
			}
		}
		f.Count = 1
		kernel = append(kernel, f)
	}
	for _, e := range stream {
		switch {
		case e.Failed() || e.Path == long:
		case e.Kind == tracer.KindIoctl:
			if sent["ioctl"]++; sent["ioctl"] > IoctlSamplePerSite {
				count(tracer.Folded{PID: 7, Kind: tracer.KindIoctl, Dev: ctl, Request: control})
				continue
			}
		default:
			if sent[e.Path]++; sent[e.Path] > SamplePerSite {
				count(tracer.Folded{PID: 7, Kind: tracer.KindOpen, Path: e.Path})
				continue
			}
		}
		folded.Event(e)
	}
	folded.AddFolded(kernel)

	for what, pair := range map[string][2]any{
		"seen":   {whole.Seen, folded.Seen},
		"ioctls": {whole.Ioctls(), folded.Ioctls()},
		"folded": {whole.Folded(), folded.Folded()},
		"events": {len(whole.Events()), len(folded.Events())},
	} {
		if fmt.Sprint(pair[0]) != fmt.Sprint(pair[1]) {
			t.Errorf("%s: whole stream %v, folded %v", what, pair[0], pair[1])
		}
	}
	var order []string
	for _, f := range whole.Folded() {
		order = append(order, f.Path)
	}
	if want := []string{"/dev/nvidiactl", long, "/dev/nvidia0"}; fmt.Sprint(order) != fmt.Sprint(want) {
		t.Errorf("folded sites in order %q, want first-seen %q", order, want)
	}
	if whole.Seen != uint64(len(stream)) {
		t.Errorf("seen %d, want %d", whole.Seen, len(stream))
	}
}

// Backends reuse their buffers (tracer.Sink): what the recorder keeps must
// not change when the caller's event does.
func TestRecorderStoresDeepCopies(t *testing.T) {
	r := New()
	e := &tracer.Event{Seq: 1, PID: 5, TID: 5, Comm: "python3", Kind: tracer.KindExec, Path: "/usr/bin/python3",
		Argv: []string{"python3", "-c", "pass"}}
	io := ioctlEv(2, 5, 8, tracer.Dev{Major: 195, Minor: 255}, 0xc020462a, 0)
	r.Event(e)
	r.Event(io)

	e.Argv[0], e.Argv[2] = "XXX", "YYY"
	e.Argv = append(e.Argv[:1], "ZZZ")
	e.Path, e.Comm, e.Seq = "/tmp/other", "other", 99
	io.Arg[0] = 0xff
	io.Dev.Major = 1

	got := r.Events()
	if got[0].Seq != 1 || got[0].Path != "/usr/bin/python3" || got[0].Comm != "python3" ||
		fmt.Sprint(got[0].Argv) != "[python3 -c pass]" {
		t.Errorf("stored exec changed with the caller's event: %+v", got[0])
	}
	if got[1].Arg[0] != 1 || got[1].Dev.Major != 195 {
		t.Errorf("stored ioctl changed with the caller's event: arg %v dev %v", got[1].Arg, got[1].Dev)
	}
	if &got[1].Arg[0] == &io.Arg[0] || got[1].Dev == io.Dev {
		t.Error("stored ioctl shares memory with the caller's event")
	}
}

func BenchmarkRecorder(b *testing.B) {
	b.Run("cuinit-stream", func(b *testing.B) {
		log, err := stracelog.ParseFiles([]string{"../../testdata/strace/h200/cuinit-ok-root.strace"})
		if err != nil {
			b.Fatal(err)
		}
		evs := log.Events
		b.ReportAllocs()
		n := 0
		var r *Recorder
		for b.Loop() {
			if n%len(evs) == 0 {
				r = New() // one recorder per cuInit, as a trace has
			}
			r.Event(&evs[n%len(evs)])
			n++
		}
		b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "events/s")
	})
	// A long job: millions of successful ioctls on a few sites, all but the
	// sample folded into counts. This path should not allocate.
	b.Run("steady-ioctls", func(b *testing.B) {
		r := New()
		sites := []*tracer.Event{
			ioctlEv(1, 9, 8, tracer.Dev{Major: 195, Minor: 255}, 0xc020462a, 0),
			ioctlEv(2, 9, 8, tracer.Dev{Major: 195, Minor: 255}, 0xc030462b, 0),
			ioctlEv(3, 9, 10, tracer.Dev{Major: 238, Minor: 0}, 0x4b, 0),
		}
		for _, s := range sites {
			for range IoctlSamplePerSite {
				r.Event(s)
			}
		}
		b.ReportAllocs()
		n := 0
		for b.Loop() {
			r.Event(sites[n%len(sites)])
			n++
		}
		b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "events/s")
		if len(r.Events()) != len(sites)*IoctlSamplePerSite {
			b.Fatalf("stored %d", len(r.Events()))
		}
	})
}

// A target retrying a refused ioctl forever: every call past the first few
// rewrites a tail slot in place, so this path should not allocate.
func BenchmarkRecorderFailingIoctls(b *testing.B) {
	r := New()
	e := ioctlEv(1, 9, 8, tracer.Dev{Major: 195, Minor: 255}, 0xc020462a, -22)
	b.ReportAllocs()
	for b.Loop() {
		r.Event(e)
	}
	if n := len(r.Events()); n > FailSamplePerSite+FailTailPerSite {
		b.Fatalf("stored %d", n)
	}
}

// TestRecorderKeepsInbandFailures: past the sample per site, a call whose
// params carry a failed status is stored; plain successes are counted.
func TestRecorderKeepsInbandFailures(t *testing.T) {
	r := New()
	ctl := &tracer.Dev{Major: 195, Minor: 255}
	for i := 0; i < IoctlSamplePerSite+5; i++ {
		r.Event(&tracer.Event{Kind: tracer.KindIoctl, FD: 8, Request: 0xc020462a, Dev: ctl, Arg: make([]byte, 64)})
	}
	bad := make([]byte, 64)
	bad[28] = 0x22 // NVOS54 status @28: NV_ERR_INVALID_CLASS
	r.Event(&tracer.Event{Kind: tracer.KindIoctl, FD: 8, Request: 0xc020462a, Dev: ctl, Arg: bad, Seq: 99})
	if len(r.Events()) != IoctlSamplePerSite+1 || r.Events()[len(r.Events())-1].Seq != 99 {
		t.Fatalf("stored %d events, last seq %d; want %d with the in-band failure last", len(r.Events()), r.Events()[len(r.Events())-1].Seq, IoctlSamplePerSite+1)
	}
	if s := r.Ioctls()[0]; s.Count != IoctlSamplePerSite+6 {
		t.Errorf("count %d", s.Count)
	}
}

// A status past the captured bytes arrives as the word the tracer read
// (UVM_SET_STREAM_STOPPED keeps rmStatus @264): a failure there is kept too.
func TestRecorderKeepsStatusWordFailures(t *testing.T) {
	r := New()
	uvm := &tracer.Dev{Major: 238}
	const stopped = 0x7
	for i := 0; i < IoctlSamplePerSite+5; i++ {
		r.Event(&tracer.Event{Kind: tracer.KindIoctl, FD: 9, Request: stopped, Dev: uvm, Arg: make([]byte, 64), Status: &tracer.ParamWord{Off: 264}})
	}
	r.Event(&tracer.Event{Kind: tracer.KindIoctl, FD: 9, Request: stopped, Dev: uvm, Arg: make([]byte, 64), Status: &tracer.ParamWord{Off: 264, Value: 0x1a}, Seq: 99})
	evs := r.Events()
	if len(evs) != IoctlSamplePerSite+1 || evs[len(evs)-1].Seq != 99 {
		t.Fatalf("stored %d events, last seq %d; want %d with the in-band failure last", len(evs), evs[len(evs)-1].Seq, IoctlSamplePerSite+1)
	}
}

// A program asking cuDeviceGetCount in a loop: its returns fold like calls,
// the first kept, every one counted; a failing return is kept.
func TestRecorderFoldsAPIReturns(t *testing.T) {
	r := New()
	n := int64(1)
	for i := 0; i < 100000; i++ {
		r.Event(&tracer.Event{Kind: tracer.KindAPI, PID: 7, Func: "cuDeviceGetCount", Out: &n})
	}
	r.Event(&tracer.Event{Kind: tracer.KindAPI, PID: 7, Func: "cuInit", Ret: 999})
	evs := r.Events()
	if len(evs) > SamplePerSite+1 || evs[len(evs)-1].Func != "cuInit" || evs[len(evs)-1].Ret != 999 {
		t.Fatalf("stored %d events, last %+v", len(evs), evs[len(evs)-1])
	}
	f := r.Folded()
	if len(f) != 1 || f[0].Calls != 100000 || f[0].Path != "cuDeviceGetCount" {
		t.Fatalf("folded %+v", f)
	}
}

// The kernel's count of a limit failure's repeats (tracer.Folded by
// syscall and errno) lands on the site of the failures it sent: one
// summary per call and errno, with every call counted.
func TestRecorderLimitFailuresFoldPerCallAndErrno(t *testing.T) {
	r := New()
	seq := uint64(0)
	for _, c := range []struct {
		sc  string
		ret int64
	}{{"eventfd2", -24}, {"eventfd2", -24}, {"eventfd2", -23}, {"mmap", -12}} {
		seq++
		r.Event(&tracer.Event{Seq: seq, PID: 7, Kind: tracer.KindLimit, Syscall: c.sc, Ret: c.ret})
	}
	r.AddFolded([]tracer.Folded{{PID: 7, Kind: tracer.KindLimit, Path: "eventfd2", Errno: 24, Count: 1000}})
	if n := len(r.Events()); n != 4 {
		t.Errorf("stored %d events, want the 4 sent", n)
	}
	got := r.Folded()
	if len(got) != 1 || got[0].Path != "eventfd2" || got[0].Errno != 24 || got[0].Calls != 1002 {
		t.Errorf("folded %+v, want eventfd2 EMFILE with 1002 calls", got)
	}
}
