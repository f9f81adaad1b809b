package main

import (
	"math"
	"strconv"
	"strings"
	"testing"
)

func TestRotateAlternates(t *testing.T) {
	seenFirst := map[string]bool{}
	for rep := range len(configs) * 2 {
		order := rotate(configs, rep)
		names := map[string]bool{}
		for _, c := range order {
			names[c.name] = true
		}
		if len(names) != len(configs) {
			t.Fatalf("rep %d: %d distinct configs, want %d", rep, len(names), len(configs))
		}
		seenFirst[order[0].name] = true
	}
	if len(seenFirst) != len(configs) {
		t.Errorf("only %d configs ever ran first, want all %d", len(seenFirst), len(configs))
	}
}

func w1Run(cfg string, rep int, loopNs, cpuNs, nvcsw int64) run {
	return run{Workload: "W1", Config: cfg, Rep: rep, OK: true, CPUNs: cpuNs, W: map[string]string{
		"loop_ns": strconv.FormatInt(loopNs, 10), "traced": "1000", "untraced": "500",
		"ns_op": "1", "nvcsw": strconv.FormatInt(nvcsw, 10)}}
}

// Added cost is paired per repetition: a slow repetition (both runs slow)
// must not show up as tracer overhead.
func TestSummarisePairsByRepetition(t *testing.T) {
	runs := []run{
		w1Run("untraced", 0, 1_000_000, 0, 10), w1Run("ptrace", 0, 3_000_000, 0, 2010),
		w1Run("untraced", 1, 5_000_000, 0, 10), w1Run("ptrace", 1, 7_000_000, 0, 2010),
		w1Run("untraced", 2, 2_000_000, 0, 10), w1Run("ptrace", 2, 4_000_000, 0, 2010),
	}
	var got *row
	for _, r := range summarise(runs) {
		if r.Config == "ptrace" {
			got = &r
		}
	}
	if got == nil {
		t.Fatal("no ptrace row")
	}
	if got.Added.Median != 2000 || got.Added.Min != 2000 || got.Added.Max != 2000 {
		t.Errorf("added = %+v, want 2000 ns per traced call in every repetition", got.Added)
	}
	if got.Per != "traced call" || got.Stops != 2 || got.OK != 3 {
		t.Errorf("row = %+v", *got)
	}
	if math.Abs(got.Ratio.Max-3) > 1e-9 || math.Abs(got.Ratio.Min-1.4) > 1e-9 {
		t.Errorf("ratio = %+v, want 1.4–3", got.Ratio)
	}
}

func TestParseLineIgnoresOtherOutput(t *testing.T) {
	kv := parseLine("cudatrace: something\nbench-workload mode=dev opens=3 ioctls=2\n")
	if kv["mode"] != "dev" || kv["opens"] != "3" || kv["ioctls"] != "2" || len(kv) != 3 {
		t.Errorf("parseLine = %v", kv)
	}
}

// The floor row says what the hook costs and what cudatrace adds above it.
func TestChecksFloorRow(t *testing.T) {
	w2 := func(cfg string, loopNs int64) run {
		r := w1Run(cfg, 0, loopNs, 0, 0)
		r.Workload = "W2"
		return r
	}
	// 500 untraced calls: +100 ns each on the floor, +150 under ebpf.
	runs := []run{w2("untraced", 1_000_000), w2("floor", 1_050_000), w2("ebpf", 1_075_000)}
	var out strings.Builder
	printChecks(&out, runs)
	want := "hook floor 100.0 ns, ours 50.0 ns above it"
	if !strings.Contains(out.String(), want) {
		t.Errorf("checks lack %q:\n%s", want, out.String())
	}
}

// W4's stops count the child processes' switches too (nvcsw_all), and its
// spread is the share of the loop between the first and last worker done.
func TestSummariseW4StopsAndSpread(t *testing.T) {
	w4 := func(cfg string, loopNs, nvcsw, all, spread int64) run {
		r := w1Run(cfg, 0, loopNs, 0, nvcsw)
		r.Workload = "W4"
		r.W["nvcsw_all"] = strconv.FormatInt(all, 10)
		r.W["spread_ns"] = strconv.FormatInt(spread, 10)
		return r
	}
	// 1000 traced calls: 1600 switches in the process, 400 in its children.
	runs := []run{w4("untraced", 1_000_000, 5, 10, 100_000), w4("ptrace", 4_000_000, 1605, 2010, 1_000_000)}
	var got *row
	for _, r := range summarise(runs) {
		if r.Config == "ptrace" {
			got = &r
		}
	}
	if got == nil || got.Stops != 2 || got.Spread != 0.25 {
		t.Fatalf("W4 ptrace row = %+v, want 2 stops per traced call and spread 0.25", got)
	}
	var out strings.Builder
	printChecks(&out, runs)
	if want := "W4 ptrace: workers' ends spread over"; !strings.Contains(out.String(), want) || !strings.Contains(out.String(), "25 % of the loop; 2.00 stops") {
		t.Errorf("checks lack the W4 spread line:\n%s", out.String())
	}
}

// Issue 31's table: a row per measure with its base and strace figures,
// PASS where the goal is met.
func TestGoalsTable(t *testing.T) {
	start := func(cfg string, startupNs int64) run {
		return run{Workload: "start", Config: cfg, OK: true, StartupNs: startupNs, W: map[string]string{}}
	}
	runs := []run{start("untraced", 1e6), start("ebpf", 21e6), start("ebpf-base", 51e6),
		start("ptrace", 9e6), start("ptrace-base", 8e6), start("strace-seccomp", 7e6)}
	var out strings.Builder
	printGoals(&out, runs)
	for _, want := range []string{"eBPF start-up (spawn → target runs)  20.0 ms  50.0 ms  6.0 ms (strace-seccomp)  ≤ 25 ms",
		"ptrace start-up                      8.0 ms   7.0 ms   6.0 ms (strace-seccomp)  ≤ strace's"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 || !strings.HasSuffix(lines[1], "PASS") || !strings.HasSuffix(lines[2], "MISS") {
		t.Errorf("want the eBPF row PASS and the ptrace row MISS:\n%s", out.String())
	}
}
