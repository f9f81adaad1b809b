package report

import (
	"github.com/cudatrace/cudatrace/annotate"
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

// maxStored caps the stored events; beyond it events are counted only.
const maxStored = 200_000

// callSite is a repeated successful call other than an ioctl.
type callSite struct {
	pid  int
	kind tracer.Kind
	path string
}

type ioctlSite struct {
	pid     int
	dev     tracer.Dev
	request uint32
}

// Recorder is the tracer.Sink that builds a report's event list: every
// event except repetitive successful ioctls, which it aggregates.
type Recorder struct {
	Events   []tracer.Event
	Seen     uint64 // events delivered
	Overflow uint64 // events not stored because of maxStored
	sites    map[ioctlSite]*IoctlSummary
	order    []ioctlSite
	calls    map[callSite]*FoldedSummary
	// callOrder is calls' keys in first-seen order, which folding in the
	// kernel (the first calls of a site are sent) leaves unchanged.
	callOrder []callSite
}

// NewRecorder returns an empty recorder.
func NewRecorder() *Recorder {
	return &Recorder{sites: make(map[ioctlSite]*IoctlSummary), calls: make(map[callSite]*FoldedSummary)}
}

// Event implements tracer.Sink.
func (r *Recorder) Event(e *tracer.Event) {
	r.Seen++
	if e.Kind == tracer.KindIoctl {
		var dev tracer.Dev
		if e.Dev != nil {
			dev = *e.Dev
		}
		site := ioctlSite{e.PID, dev, e.Request}
		s := r.ioctlSummary(site)
		s.Count++
		if e.Failed() {
			s.Failed++ // failures are the evidence: always stored
		} else if s.Count-s.Failed > IoctlSamplePerSite && !annotate.InbandMayHaveFailed(e) {
			// Counted, not stored; an in-band failure (ioctl 0, an error
			// in the params' status) is evidence and is stored.
			return
		}
	} else if !e.Failed() && e.Kind != tracer.KindExec && e.Kind != tracer.KindExit {
		s := r.callSummary(callSite{e.PID, e.Kind, e.Path})
		s.Calls++
		if s.Calls > SamplePerSite {
			return // counted, not stored
		}
	}
	if len(r.Events) >= maxStored {
		r.Overflow++
		return
	}
	r.Events = append(r.Events, e.Copy())
}

// AddFolded adds the calls a backend counted without delivering
// (tracer.Spec.FoldIoctlsAfter): the repeats past the first few per site,
// which this recorder would have counted without storing.
func (r *Recorder) AddFolded(folded []tracer.Folded) {
	for _, f := range folded {
		r.Seen += f.Count
		if f.Kind == tracer.KindIoctl {
			r.ioctlSummary(ioctlSite{f.PID, f.Dev, f.Request}).Count += f.Count
			continue
		}
		r.callSummary(callSite{f.PID, f.Kind, f.Path}).Calls += f.Count
	}
}

// Ioctls returns the per-site ioctl counts in first-seen order.
func (r *Recorder) Ioctls() []IoctlSummary {
	out := make([]IoctlSummary, 0, len(r.order))
	for _, s := range r.order {
		out = append(out, *r.sites[s])
	}
	return out
}

// ioctlSummary returns site's summary, adding it (in first-seen order) if new.
func (r *Recorder) ioctlSummary(site ioctlSite) *IoctlSummary {
	return summary(r.sites, &r.order, site, func() *IoctlSummary {
		return &IoctlSummary{PID: site.pid, Dev: site.dev, Request: site.request}
	})
}

// callSummary returns site's summary, adding it (in first-seen order) if new.
func (r *Recorder) callSummary(site callSite) *FoldedSummary {
	return summary(r.calls, &r.callOrder, site, func() *FoldedSummary {
		return &FoldedSummary{PID: site.pid, Kind: site.kind, Path: site.path}
	})
}

func summary[K comparable, S any](sites map[K]*S, order *[]K, site K, newSummary func() *S) *S {
	s := sites[site]
	if s == nil {
		s = newSummary()
		sites[site] = s
		*order = append(*order, site)
	}
	return s
}

// Folded returns, for each call site with more than SamplePerSite successful
// calls, how many there were in all (the first SamplePerSite are stored), in
// the order the sites were first seen.
func (r *Recorder) Folded() []FoldedSummary {
	var out []FoldedSummary
	for _, site := range r.callOrder {
		if s := r.calls[site]; s.Calls > SamplePerSite {
			out = append(out, *s)
		}
	}
	return out
}
