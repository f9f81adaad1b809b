package render

import (
	"github.com/cudatrace/cudatrace/report"
)

// TimelineRepeats is, for the external tests, the timeline's rows: each
// row's ×N count (0 for a row of one call).
func TimelineRepeats(rep *report.Report, all bool) []uint64 {
	rows := timelineRows(rep, all)
	out := make([]uint64, len(rows))
	for i, r := range rows {
		out[i] = r.repeat
	}
	return out
}
