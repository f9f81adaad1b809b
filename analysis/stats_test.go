package analysis

import (
	"testing"

	"golang.org/x/sys/unix"
)

// Counts in findings are true counts: the calls a recorder counted without
// storing (Unstored) are added to the stored ones.
func TestCallsOKCountsUnstoredCalls(t *testing.T) {
	b := newEvents(623, "python3")
	ctl := dev(195, 255)
	for range 32 {
		b.open("/dev/nvidiactl", unix.O_RDWR, 3, ctl)
	}
	for range 8 {
		b.ioctl(3, 0xc020462a, 0, ctl)
	}
	for range 8 {
		b.ioctl(3, 0xc020462a, errno(unix.EINVAL), ctl)
	}
	unstored := []Unstored{
		{PID: 623, Kind: "open", Path: "/dev/nvidiactl", Count: 168},
		{PID: 623, Kind: "ioctl", Dev: *ctl, Count: 999_984 - 999_000},
		{PID: 623, Kind: "ioctl", Dev: *ctl, Failed: true, Count: 999_000},
		{PID: 623, Kind: "stat", Path: "/dev/nvidiactl", Count: 5},
	}
	a := AnalyzeFacts(b.evs, h200(), Facts{Unstored: unstored})
	mustContain(t, "calls-ok", detail(find(t, a, "calls-ok")), "/dev/nvidiactl (c 195:255) opened 200x, allowed; 1000000 ioctls, 999008 of them failed")

	st := Summarize(b.evs, unstored)
	if st.Events != len(b.evs)+168+984+999_000+5 || st.Failures != 8+999_000 || st.Nodes[0].Stats != 5 {
		t.Errorf("stats %+v", st)
	}
	// Without them, only the stored calls count.
	mustContain(t, "calls-ok", detail(find(t, Analyze(b.evs, h200()), "calls-ok")), "opened 32x, allowed; 16 ioctls, 8 of them failed")
}
