package tracer

import (
	"testing"
	"time"
)

// stallingSink holds every stop until its deadline, as a sink whose reads
// of a hostile target all stall would; time is a fake clock it advances.
type stallingSink struct {
	SinkFunc
	clock time.Time
	holds []time.Duration // each Stopped's allowance
}

func (s *stallingSink) Stopped(e *Event, deadline time.Time) {
	s.holds = append(s.holds, deadline.Sub(s.clock))
	s.clock = deadline
}

func TestStopHolderBoundsEveryHoldAndTheirSum(t *testing.T) {
	sink := &stallingSink{SinkFunc: func(*Event) {}, clock: time.Unix(1000, 0)}
	h := NewStopHolder(sink)
	if h.max != StopHoldMax || h.left != StopHoldBudget {
		t.Fatalf("limits %v/%v, want %v per hold and %v in all", h.max, h.left, StopHoldMax, StopHoldBudget)
	}
	h.max, h.left = 4*time.Second, 10*time.Second
	h.now = func() time.Time { return sink.clock }
	h.Hold(&Event{Kind: KindOpen, Ret: 3}) // succeeded: nothing to hold for
	for range 5 {
		h.Hold(&Event{Kind: KindOpen, Ret: -1})
	}
	want := []time.Duration{4 * time.Second, 4 * time.Second, 2 * time.Second}
	if len(sink.holds) != len(want) {
		t.Fatalf("holds %v, want %v: 4 s each, the 2 s left of 10 s, then none", sink.holds, want)
	}
	for i := range want {
		if sink.holds[i] != want[i] {
			t.Errorf("hold %d allowed %v, want %v", i, sink.holds[i], want[i])
		}
	}
}

// A sink that returns at once spends nearly nothing of the budget.
func TestStopHolderChargesOnlyTheTimeHeld(t *testing.T) {
	sink := &quickSink{SinkFunc: func(*Event) {}}
	h := NewStopHolder(sink)
	for range 1000 {
		h.Hold(&Event{Kind: KindIoctl, Ret: -25})
	}
	if sink.n != 1000 || h.left < StopHoldBudget-time.Second {
		t.Errorf("%d of 1000 failed calls reached the sink, %v of the budget left", sink.n, h.left)
	}
}

type quickSink struct {
	SinkFunc
	n int
}

func (s *quickSink) Stopped(*Event, time.Time) { s.n++ }

func TestStopHolderIgnoresAPlainSink(t *testing.T) {
	h := NewStopHolder(SinkFunc(func(*Event) {}))
	h.Hold(&Event{Kind: KindOpen, Ret: -1}) // must not panic or wait
	var nilHolder *StopHolder
	nilHolder.Hold(&Event{Kind: KindOpen, Ret: -1})
	if h.sink != nil {
		t.Errorf("a Sink without Stopped became a StopSink")
	}
}
