package watch

import (
	"testing"

	"github.com/cudatrace/cudatrace/snapshot"

	"github.com/cudatrace/cudatrace/tracer"
)

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

// Every diagnosed process was followed: the followed counter never ends
// below the diagnoses, even when the backend's last live count predates
// them (it is sampled, and the final result carries none).
func TestFollowedCoversDiagnoses(t *testing.T) {
	h := &fakeHost{cgroups: map[int]string{60: "/", 61: "/", 62: "/"}}
	events := interleave(append(deniedCtl(60, "a"), exitOf(60, 1)), append(deniedCtl(61, "b"), exitOf(61, 1)),
		append(missingUVM(62, "c"), exitOf(62, 1)))
	b := &fakeBackend{events: events, stats: map[int]tracer.LiveStats{0: {Following: 1, Followed: 1}}}
	m := NewMetrics("v-test")
	watchWith(t, b, h, func(o *Options) { o.Metrics = m })
	fams := scrape(t, m)
	diagnosed := 0.0
	for _, mt := range fams["cudatrace_diagnoses_total"].GetMetric() {
		diagnosed += mt.GetCounter().GetValue()
	}
	followed, _ := value(fams, "cudatrace_processes_followed_total", nil)
	if diagnosed != 3 || followed < diagnosed {
		t.Errorf("cudatrace_processes_followed_total %v, cudatrace_diagnoses_total %v: want 3 diagnosed, followed at least that", followed, diagnosed)
	}
}

// Under -v a process that loaded libcuda and exited without a device call
// or a CUDA return, or only ran a command, is printed as healthy, not
// diagnosed, on a host whose /proc/devices lacks NVIDIA's majors: nothing
// failed in it, so nothing says the driver is missing (issue 32 low item:
// each such process was a driver-not-loaded diagnosis, in the metric too).
func TestVerboseNoDeviceCallNotDiagnosed(t *testing.T) {
	h := &fakeHost{cgroups: map[int]string{70: "/", 71: "/"}}
	events := []tracer.Event{
		{PID: 70, TID: 70, Comm: "python3", Kind: tracer.KindOpen, Syscall: "openat", Path: "/usr/lib/x86_64-linux-gnu/libcuda.so.1", Ret: 3},
		// A child of a followed process that only runs a shell command.
		{PID: 71, TID: 71, Comm: "sh", Kind: tracer.KindExec, Syscall: "execve", Path: "/bin/sleep", Ret: 0, Argv: []string{"sleep", "0.02"}},
		exitOf(70, 0), exitOf(71, 0),
	}
	m := NewMetrics("v-test")
	_, sum, out := watchWith(t, &fakeBackend{events: events}, h, func(o *Options) {
		o.Verbose, o.Metrics = true, m
		// A host without the driver: the analysis has an error finding
		// (driver-not-loaded), but this process never needed it.
		collect := o.System.Collect
		o.System.Collect = func(so snapshot.Options) *snapshot.Snapshot {
			s := collect(so)
			s.Driver, s.Nodes = snapshot.Driver{}, nil
			s.ProcDevices = []snapshot.DriverMajor{{Major: 1, Name: "mem"}, {Major: 4, Name: "tty"}, {Major: 10, Name: "misc"}}
			return s
		}
	})
	lines := parseLines(t, out)
	if len(lines) != 2 || lines[0].Cause != "" || lines[1].Cause != "" {
		t.Errorf("lines %+v, want two without a cause", lines)
	}
	if sum.Diagnosed != 0 || sum.Healthy != 2 {
		t.Errorf("summary %+v, want 0 diagnosed, 2 healthy", *sum)
	}
	fams := scrape(t, m)
	if n := len(fams["cudatrace_diagnoses_total"].GetMetric()); n != 0 {
		t.Errorf("cudatrace_diagnoses_total has %d series, want none", n)
	}
	if got, _ := value(fams, "cudatrace_processes_healthy_total", nil); got != 2 {
		t.Errorf("cudatrace_processes_healthy_total %v, want 2", got)
	}
}
