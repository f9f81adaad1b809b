package annotate

import "github.com/cudatrace/cudatrace/tracer"

// Stats counts what a trace did to NVIDIA nodes.
type Stats struct {
	Events   int
	Failures int // failed calls of any kind
	// Nodes is one entry per /dev/nvidia* path, in first-seen order.
	Nodes []NodeStats
}

// NodeStats counts the calls on one node. Ioctls are attributed through the
// device number of the successful opens.
type NodeStats struct {
	Path          string
	Dev           *tracer.Dev
	Opens         int // successful opens
	OpenFailures  int
	Stats         int
	Ioctls        int
	IoctlFailures int
}

// Summarize counts events per NVIDIA node.
func Summarize(events []tracer.Event) Stats {
	st := Stats{Events: len(events)}
	idx := map[string]int{}
	byDev := map[tracer.Dev]int{}
	node := func(p string) *NodeStats {
		i, ok := idx[p]
		if !ok {
			i = len(st.Nodes)
			idx[p] = i
			st.Nodes = append(st.Nodes, NodeStats{Path: p})
		}
		return &st.Nodes[i]
	}
	for i := range events {
		e := &events[i]
		if e.Failed() {
			st.Failures++
		}
		switch e.Kind {
		case tracer.KindOpen, tracer.KindStat:
			if !isNvidiaNode(e.Path) {
				continue
			}
			n := node(e.Path)
			if e.Kind == tracer.KindStat {
				n.Stats++
				continue
			}
			if e.Failed() {
				n.OpenFailures++
				continue
			}
			n.Opens++
			if e.Dev != nil && n.Dev == nil {
				d := *e.Dev
				n.Dev = &d
				byDev[d] = idx[e.Path]
			}
		case tracer.KindIoctl:
			if e.Dev == nil {
				continue
			}
			if j, ok := byDev[*e.Dev]; ok {
				st.Nodes[j].Ioctls++
				if e.Failed() {
					st.Nodes[j].IoctlFailures++
				}
			}
		}
	}
	return st
}
