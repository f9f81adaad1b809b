package report

import (
	"github.com/cudatrace/cudatrace/analysis"
	"github.com/cudatrace/cudatrace/diagnose/record"
	"github.com/cudatrace/cudatrace/tracer"
)

// Unstored is what analysis.Analyze needs for true counts: per call site,
// how many more calls the report's summaries (ioctls, folded) count than
// its events hold. It counts the stored events itself rather than trusting
// a field, so it holds for reports written before failures were folded.
func (rep *Report) Unstored() []analysis.Unstored {
	type ioctlKey struct {
		record.IoctlSite
		failed bool
	}
	storedIoctls := map[ioctlKey]uint64{}
	storedSites := map[record.Site]uint64{}
	for i := range rep.Events {
		e := &rep.Events[i]
		if e.Kind == tracer.KindIoctl {
			var dev tracer.Dev
			if e.Dev != nil {
				dev = *e.Dev
			}
			storedIoctls[ioctlKey{record.IoctlSite{PID: e.PID, Dev: dev, Request: e.Request}, e.Failed()}]++
		} else if k, ok := record.SiteOf(e); ok {
			storedSites[k]++
		}
	}
	var out []analysis.Unstored
	add := func(u analysis.Unstored, stored uint64) {
		if u.Count > stored {
			u.Count -= stored
			out = append(out, u)
		}
	}
	for _, s := range rep.Ioctls {
		site := record.IoctlSite{PID: s.PID, Dev: s.Dev, Request: s.Request}
		failed := min(s.Failed, s.Count)
		u := analysis.Unstored{PID: s.PID, Kind: tracer.KindIoctl, Dev: s.Dev}
		u.Count = s.Count - failed
		add(u, storedIoctls[ioctlKey{site, false}])
		u.Failed, u.Count = true, failed
		add(u, storedIoctls[ioctlKey{site, true}])
	}
	for i := range rep.Folded {
		f := &rep.Folded[i]
		if f.Kind == tracer.KindIoctl {
			continue // in Ioctls
		}
		add(analysis.Unstored{PID: f.PID, Kind: f.Kind, Path: f.Path, Failed: f.Errno != 0, Count: f.Calls}, storedSites[f.Site()])
	}
	return out
}
