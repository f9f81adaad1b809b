// Package record is the tracer.Sink that keeps a trace's events for its
// report: the first few calls of every site, the last few failures of
// each, exact counts of all, and the calls a verdict rests on past the
// cap. Its sample sizes are the ones a backend folds after
// (tracer.Spec.FoldIoctlsAfter, FoldCallsAfter), so that both backends
// store the same events.
package record

import (
	"slices"

	"github.com/cudatrace/cudatrace/nvdev"
	"github.com/cudatrace/cudatrace/tracer"
)

// IoctlSamplePerSite bounds how many successful ioctls of one (pid, device,
// request) are kept verbatim. A torch start issues ~1,600 ioctls, a long job
// millions; the rest are counted, so memory stays flat however long the
// trace runs.
const IoctlSamplePerSite = 8

// SamplePerSite bounds how many successful identical calls of other kinds
// (one process opening or stat'ing one path) are kept verbatim: enough for a
// whole cuInit (it reads the params file ~10 times), while a job reopening a
// device in a loop no longer grows memory without bound.
const SamplePerSite = 32

// Failures of one site (one process, call, path or device and request, and
// errno) keep their first FailSamplePerSite and their last FailTailPerSite;
// the rest are counted. A target retrying a refused ioctl a million times
// then stores 12 events, and the call after them is still kept. Successes
// keep only their first few, as the eBPF backend sends them, so that both
// backends store the same events.
const (
	FailSamplePerSite = 8
	FailTailPerSite   = 4
)

// maxStored caps the stored events; beyond it events are counted only,
// except the calls that decide a verdict (see decisive), which may use
// maxReserved more. report's Load takes their sum as its size-hint bound.
const (
	maxStored   = 200_000
	maxReserved = 20_000
)

// maxSites bounds the call sites followed, and the ioctl sites counted
// (the target chooses paths and request numbers). Past it, a new site's
// events are stored (within maxStored) but neither folded nor counted.
const maxSites = 20_000

// decisive reports whether e is a call a verdict can rest on, stored even
// past maxStored: an exec or exit, a CUDA/NVML return, and a failed open,
// mknod or unlink (the node that could not be opened or made).
func decisive(e *tracer.Event) bool {
	switch e.Kind {
	case tracer.KindExec, tracer.KindExit, tracer.KindAPI:
		return true
	case tracer.KindOpen, tracer.KindMknod, tracer.KindUnlink:
		return e.Failed()
	}
	return false
}

// site is what the recorder keeps per call site.
type site struct {
	calls  uint64 // every call, stored or not
	stored int    // calls stored from the start (the head)
	// tail holds the latest failures past the head, oldest at tailAt once
	// it is full.
	tail   []arrival
	tailAt int
}

// arrival is a stored event with its position in the stream.
type arrival struct {
	n  uint64
	ev tracer.Event
}

// Recorder is the tracer.Sink that builds a report's event list: the first
// few calls of every site, the last few failures of each, and counts of
// all.
type Recorder struct {
	Seen     uint64 // events delivered
	Overflow uint64 // events neither stored nor folded, because of maxStored

	head     []tracer.Event // in arrival order
	headAt   []uint64       // each head event's arrival number
	tailLen  int            // events held in the sites' tails
	sites    map[Site]*site
	order    []Site // sites' keys in first-seen order
	ioctls   map[IoctlSite]*IoctlSummary
	ioctlSeq []IoctlSite
	merged   []tracer.Event // Events' result until the next event
	limit    int            // stored events past which only decisive ones are (maxStored)
}

// New returns an empty recorder.
func New() *Recorder { return NewLimited(maxStored) }

// NewLimited is New storing at most limit events (plus a tenth of it for
// the calls that decide a verdict): cudatrace watch holds a recorder per
// live process, so each gets a smaller share.
func NewLimited(limit int) *Recorder {
	limit = min(max(limit, 1), maxStored)
	return &Recorder{sites: make(map[Site]*site), ioctls: make(map[IoctlSite]*IoctlSummary), limit: limit}
}

// Event implements tracer.Sink.
func (r *Recorder) Event(e *tracer.Event) {
	r.Seen++
	r.merged = nil
	if e.Kind == tracer.KindIoctl {
		var dev tracer.Dev
		if e.Dev != nil {
			dev = *e.Dev
		}
		if s := r.ioctlSummary(IoctlSite{e.PID, dev, e.Request}); s != nil {
			s.Count++
			if e.Failed() {
				s.Failed++
			}
		}
	}
	if e.Kind == tracer.KindIoctl && !e.Failed() && nvdev.InbandMayHaveFailed(e) {
		// ioctl 0 with an error in the params' status: evidence, stored
		// however often its site repeats.
		r.store(e, true)
		return
	}
	k, ok := SiteOf(e)
	if !ok {
		r.store(e, true)
		return
	}
	s := r.site(k)
	if s == nil {
		// Too many sites to follow: a failure may be its site's first.
		r.store(e, decisive(e) || k.Errno != 0)
		return
	}
	s.calls++
	if s.stored < headSize(k) {
		// The first stored failure of a site always counts as decisive:
		// every failing site shows in the events.
		if r.store(e, decisive(e) || (k.Errno != 0 && s.stored == 0)) {
			s.stored++
		}
		return
	}
	if k.Errno != 0 {
		r.keepLast(s, e)
	}
}

func headSize(k Site) int {
	switch {
	case k.Errno != 0:
		return FailSamplePerSite
	case k.Kind == tracer.KindIoctl:
		return IoctlSamplePerSite
	}
	return SamplePerSite
}

// room reports whether one more event may be stored.
func (r *Recorder) room(decisive bool) bool {
	n := len(r.head) + r.tailLen
	return n < r.limit || (decisive && n < r.limit+r.limit/(maxStored/maxReserved))
}

func (r *Recorder) store(e *tracer.Event, decisive bool) bool {
	if !r.room(decisive) {
		r.Overflow++
		return false
	}
	r.head = append(r.head, e.Copy())
	r.headAt = append(r.headAt, r.Seen)
	return true
}

// keepLast puts a failure past the head into its site's tail, replacing the
// oldest there once the tail is full (or may not grow: a site's last
// failure is decisive, a second-to-last is not).
func (r *Recorder) keepLast(s *site, e *tracer.Event) {
	if len(s.tail) < FailTailPerSite && r.room(len(s.tail) == 0) {
		s.tail = append(s.tail, arrival{r.Seen, e.Copy()})
		r.tailLen++
		return
	}
	if len(s.tail) == 0 {
		r.Overflow++
		return
	}
	slot := &s.tail[s.tailAt]
	slot.n = r.Seen
	copyReusing(&slot.ev, e)
	s.tailAt = (s.tailAt + 1) % len(s.tail)
}

// copyReusing is dst = src.Copy(), reusing dst's buffers: a tail slot is
// rewritten for every repeat of a failing call.
func copyReusing(dst, src *tracer.Event) {
	arg, argv, dev := dst.Arg[:0], dst.Argv[:0], dst.Dev
	*dst = *src
	dst.Arg = append(arg, src.Arg...)
	dst.Argv = append(argv, src.Argv...)
	if src.Out != nil {
		o := *src.Out
		dst.Out = &o
	}
	if src.Status != nil {
		w := *src.Status
		dst.Status = &w
	}
	if src.Dev == nil {
		dst.Dev = nil
		return
	}
	if dev == nil {
		dev = new(tracer.Dev)
	}
	*dev = *src.Dev
	dst.Dev = dev
}

// Events returns the stored events in arrival order: each site's first few
// calls, its last few failures, and every exec, exit and CUDA/NVML return.
// The slice is shared until the next Event.
func (r *Recorder) Events() []tracer.Event {
	if r.tailLen == 0 {
		return r.head
	}
	if r.merged != nil {
		return r.merged
	}
	tails := make([]arrival, 0, r.tailLen)
	for _, k := range r.order {
		s := r.sites[k]
		tails = append(tails, s.tail[s.tailAt:]...)
		tails = append(tails, s.tail[:s.tailAt]...)
	}
	slices.SortFunc(tails, func(a, b arrival) int { return cmpUint(a.n, b.n) })
	out := make([]tracer.Event, 0, len(r.head)+len(tails))
	i := 0
	for _, t := range tails {
		for i < len(r.head) && r.headAt[i] < t.n {
			out = append(out, r.head[i])
			i++
		}
		out = append(out, t.ev)
	}
	r.merged = append(out, r.head[i:]...)
	return r.merged
}

func cmpUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// AddFolded adds the calls a backend counted without delivering
// (tracer.Spec.FoldIoctlsAfter): the repeats past the first few per site,
// which this recorder would have counted without storing.
func (r *Recorder) AddFolded(folded []tracer.Folded) {
	for _, f := range folded {
		r.Seen += f.Count
		k := Site{PID: f.PID, Kind: f.Kind, Path: f.Path, Errno: f.Errno}
		if f.Kind == tracer.KindIoctl {
			if s := r.ioctlSummary(IoctlSite{f.PID, f.Dev, f.Request}); s != nil {
				s.Count += f.Count
			}
			k = Site{PID: f.PID, Kind: f.Kind, Dev: f.Dev, Request: f.Request}
		}
		if s := r.site(k); s != nil {
			s.calls += f.Count
		}
	}
	r.merged = nil
}

// Ioctls returns the per-site ioctl counts in first-seen order.
func (r *Recorder) Ioctls() []IoctlSummary {
	out := make([]IoctlSummary, 0, len(r.ioctlSeq))
	for _, s := range r.ioctlSeq {
		out = append(out, *r.ioctls[s])
	}
	return out
}

// ioctlSummary returns site's summary, adding it (in first-seen order) if
// new, or nil when maxSites are counted already.
func (r *Recorder) ioctlSummary(site IoctlSite) *IoctlSummary {
	s := r.ioctls[site]
	if s == nil {
		if len(r.ioctls) >= maxSites {
			return nil
		}
		s = &IoctlSummary{PID: site.PID, Dev: site.Dev, Request: site.Request}
		r.ioctls[site] = s
		r.ioctlSeq = append(r.ioctlSeq, site)
	}
	return s
}

// site returns k's state, adding it (in first-seen order) if new, or nil
// when maxSites are followed already.
func (r *Recorder) site(k Site) *site {
	s := r.sites[k]
	if s == nil {
		if len(r.sites) >= maxSites {
			return nil
		}
		s = &site{}
		r.sites[k] = s
		r.order = append(r.order, k)
	}
	return s
}

// Folded returns, in the order the sites were first seen, every site with
// calls that are counted but not stored, except successful ioctls (Ioctls
// counts those): Calls is how many there were in all.
func (r *Recorder) Folded() []FoldedSummary {
	var out []FoldedSummary
	for _, k := range r.order {
		s := r.sites[k]
		if s.calls == uint64(s.stored+len(s.tail)) || (k.Kind == tracer.KindIoctl && k.Errno == 0) {
			continue
		}
		f := FoldedSummary{PID: k.PID, Kind: k.Kind, Path: k.Path, Errno: k.Errno, Calls: s.calls}
		if k.Kind == tracer.KindIoctl {
			d := k.Dev
			f.Dev, f.Request = &d, k.Request
		}
		out = append(out, f)
	}
	return out
}
