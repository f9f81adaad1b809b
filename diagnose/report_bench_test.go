package diagnose

import (
	"fmt"
	"testing"

	"github.com/cudatrace/cudatrace/report"
	"github.com/cudatrace/cudatrace/snapshot"
	"github.com/cudatrace/cudatrace/tracer/stracelog"
)

// A saved report with n snapshot nodes, re-analysed as 'cudatrace report'
// does: time per node should stay flat as n grows (200k nodes once took
// over 2 minutes).
func BenchmarkReanalyseNodes(b *testing.B) {
	base := deniedUVMReport(b)
	for _, n := range []int{5_000, 10_000, 20_000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				rep := *base
				snap := *base.Snapshot
				snap.Nodes = make([]snapshot.Node, n)
				for i := range snap.Nodes {
					snap.Nodes[i] = snapshot.Node{Path: fmt.Sprintf("/dev/nvidia%d", i), Exists: true, Type: "c", Major: 195, Minor: uint32(i % 256), Mode: 0o666}
				}
				rep.Snapshot = &snap
				b.StartTimer()
				Reanalyse(&rep)
			}
		})
	}
}

func deniedUVMReport(b *testing.B) *report.Report {
	l, err := stracelog.ParseFiles([]string{"../../shared/recordings/h200/cuinit-deny-uvm.strace"})
	if err != nil {
		b.Skip("no recording: ", err)
	}
	return FromStraceLog(l, "bench")
}
