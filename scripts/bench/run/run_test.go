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
