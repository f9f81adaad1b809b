package watch

import "testing"

// A refused process is counted once however many events it sends, even
// when more processes are refused than the cap follows (the set of left-out
// PIDs was bounded by the cap itself, so past it each event counted again).
func TestRefusedCountedOnce(t *testing.T) {
	h := &fakeHost{cgroups: map[int]string{50: "/", 51: "/", 52: "/", 53: "/"}}
	events := interleave(deniedCtl(50, "a"), deniedCtl(51, "b"), deniedCtl(52, "c"), deniedCtl(53, "d"))
	events = append(events, exitOf(50, 1), exitOf(51, 1), exitOf(52, 1), exitOf(53, 1))
	m := NewMetrics("v-test")
	_, sum, _ := watchWith(t, &fakeBackend{events: events}, h, func(o *Options) { o.MaxProcesses = 1; o.Metrics = m })
	if sum.Refused != 3 {
		t.Errorf("refused %d, want 3 (51, 52 and 53, two events each)", sum.Refused)
	}
	if got := counterValue(t, m, "cudatrace_processes_refused_total", nil); got != 3 {
		t.Errorf("cudatrace_processes_refused_total %v, want 3", got)
	}
}
