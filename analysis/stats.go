package analysis

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

// Unstored counts calls of one site that a trace saw but does not hold
// as events: a recorder keeps the first (and last) few calls per site and
// counts the rest. Analyze takes them so that its counts are true counts.
type Unstored struct {
	PID    int
	Kind   tracer.Kind
	Path   string     // calls other than ioctls
	Dev    tracer.Dev // ioctls: the device behind the fd
	Failed bool
	Count  uint64
}

// Summarize counts events, and the calls unstored says were left out, per
// NVIDIA node.
func Summarize(events []tracer.Event, unstored []Unstored) Stats {
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
		// A call that never returned (seccomp KILL/TRAP) did not work.
		failed := e.Failed() || e.NoReturn
		if failed {
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
			if failed {
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
				if failed {
					st.Nodes[j].IoctlFailures++
				}
			}
		}
	}
	for _, u := range unstored {
		n := int(min(u.Count, uint64(maxInt)))
		st.Events += n
		if u.Failed {
			st.Failures += n
		}
		switch u.Kind {
		case tracer.KindOpen, tracer.KindStat:
			if !isNvidiaNode(u.Path) {
				continue
			}
			c := node(u.Path)
			switch {
			case u.Kind == tracer.KindStat:
				c.Stats += n
			case u.Failed:
				c.OpenFailures += n
			default:
				c.Opens += n
			}
		case tracer.KindIoctl:
			if j, ok := byDev[u.Dev]; ok {
				st.Nodes[j].Ioctls += n
				if u.Failed {
					st.Nodes[j].IoctlFailures += n
				}
			}
		}
	}
	return st
}

const maxInt = int(^uint(0) >> 1)
