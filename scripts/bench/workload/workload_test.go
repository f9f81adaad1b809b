package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

// runWorkload builds nothing: it re-runs this test binary as the workload.
func runWorkload(t *testing.T, args ...string) map[string]string {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "BENCH_WORKLOAD_MAIN=1")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("workload %v: %v\n%s", args, err, out)
	}
	return parseLine(string(out))
}

func TestMain(m *testing.M) {
	if os.Getenv("BENCH_WORKLOAD_MAIN") == "1" {
		os.Args = append([]string{"workload"}, os.Args[1:]...)
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func num(t *testing.T, kv map[string]string, k string) int64 {
	t.Helper()
	v, err := strconv.ParseInt(kv[k], 10, 64)
	if err != nil {
		t.Fatalf("%s=%q in %v", k, kv[k], kv)
	}
	return v
}

// The driver trusts these counts as ground truth, so they must be exactly
// the calls made: here on a regular file, where ioctl fails with ENOTTY.
func TestDeviceLoopCounts(t *testing.T) {
	path := filepath.Join(t.TempDir(), "node")
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	kv := runWorkload(t, "-mode", "dev", "-path", path, "-n", "100", "-threads", "3", "-procs", "2")
	for k, want := range map[string]int64{
		"workers": 5, "opens": 500, "ioctls": 500, "closes": 500, "getppids": 0,
		"open_errors": 0, "ioctl_errors": 500, "traced": 1000, "untraced": 500,
	} {
		if got := num(t, kv, k); got != want {
			t.Errorf("%s = %d, want %d", k, got, want)
		}
	}
	if num(t, kv, "loop_ns") <= 0 || num(t, kv, "start_unix_ns") <= 0 {
		t.Errorf("timings missing: %v", kv)
	}
	// Five workers' ends, the children's included: the last ends after
	// the start and within the loop, the spread is no longer than it.
	start, end, spread := num(t, kv, "start_unix_ns"), num(t, kv, "end_unix_ns"), num(t, kv, "spread_ns")
	if end <= start || spread < 0 || spread > num(t, kv, "loop_ns") {
		t.Errorf("end_unix_ns %d, spread_ns %d: want start %d < end, 0 ≤ spread ≤ loop_ns: %v", end, spread, start, kv)
	}
	if num(t, kv, "nvcsw_all") < num(t, kv, "nvcsw") {
		t.Errorf("nvcsw_all %d < nvcsw %d: the children's are added, never subtracted", num(t, kv, "nvcsw_all"), num(t, kv, "nvcsw"))
	}
}

func TestGetppidCounts(t *testing.T) {
	kv := runWorkload(t, "-mode", "getppid", "-n", "1000")
	if num(t, kv, "getppids") != 1000 || num(t, kv, "untraced") != 1000 || num(t, kv, "traced") != 0 {
		t.Errorf("counts wrong: %v", kv)
	}
}

// A node that cannot be opened is counted as an error and fails the run,
// so a broken setup never passes as a fast one.
func TestMissingNodeFails(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-mode", "dev", "-path", filepath.Join(t.TempDir(), "absent"), "-n", "10")
	cmd.Env = append(os.Environ(), "BENCH_WORKLOAD_MAIN=1")
	out, err := cmd.Output()
	if err == nil {
		t.Fatalf("missing node: exit 0, want failure; output %s", out)
	}
	kv := parseLine(string(out))
	if num(t, kv, "open_errors") != 10 || num(t, kv, "ioctls") != 0 {
		t.Errorf("counts wrong: %v", kv)
	}
}
