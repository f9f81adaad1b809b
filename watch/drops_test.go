package watch

import (
	"testing"

	"github.com/cudatrace/cudatrace/tracer"
)

// The drop count arrives after the loss it counts: a process first seen
// after a rise may have lost its earlier events to it, so its line is
// incomplete too, until a statistics interval passes with no new drop;
// a process first seen after such a quiet interval is complete.
func TestDropsMarkLateStarters(t *testing.T) {
	h := &fakeHost{cgroups: map[int]string{30: "/", 32: "/", 34: "/"}}
	a := append(deniedCtl(30, "during"), exitOf(30, 1))
	b := append(deniedCtl(32, "after"), exitOf(32, 1))
	c := append(deniedCtl(34, "quiet"), exitOf(34, 1))
	events := append(append(append([]tracer.Event{}, a...), b...), c...)
	bk := &fakeBackend{events: events, stats: map[int]tracer.LiveStats{
		0:               {Dropped: 0},
		1:               {Dropped: 5}, // lost while 30 ran
		len(a):          {Dropped: 9}, // lost before 32's first event: perhaps its own
		len(a) + 1:      {Dropped: 9},
		len(a) + 2:      {Dropped: 9}, // a quiet interval: the count is caught up
		len(a) + 3:      {Dropped: 9},
		len(a) + len(b): {Dropped: 9},
	}}
	_, sum, out := watchWith(t, bk, h, nil)
	lines := byPID(parseLines(t, out))
	for pid, want := range map[int]bool{30: true, 32: true, 34: false} {
		if len(lines[pid]) != 1 || lines[pid][0].Incomplete != want {
			t.Errorf("pid %d: %+v, want one line, incomplete %v", pid, lines[pid], want)
		}
	}
	if sum.Incomplete != 2 {
		t.Errorf("summary incomplete %d, want 2", sum.Incomplete)
	}
	if sum.Dropped != 9 {
		t.Errorf("summary dropped %d, want 9", sum.Dropped)
	}
}
