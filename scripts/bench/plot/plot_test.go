package main

import (
	"encoding/xml"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestPlotFromSummary(t *testing.T) {
	csv := "workload,config,added_ns_median,added_ns_min,added_ns_max,added_per\n" +
		"W1,untraced,,,,\n" +
		"W1,ebpf,351.2,300,400,traced call\n" +
		"W1,strace,90000,80000,95000,traced call\n" +
		"W2,ebpf-other,-3,-10,5,untraced call\n" +
		"start,ebpf,1e8,1e8,1e8,run\n"
	in := filepath.Join(t.TempDir(), "s.csv")
	os.WriteFile(in, []byte(csv), 0o644)
	bars, err := readBars(in)
	if err != nil {
		t.Fatal(err)
	}
	if len(bars) != 3 {
		t.Fatalf("%d bars, want 3 (rows with a per-call cost): %+v", len(bars), bars)
	}
	svg := render(bars)
	if err := xml.Unmarshal([]byte(svg), new(struct{})); err != nil {
		t.Fatalf("not well-formed SVG: %v", err)
	}
	for _, want := range []string{"351 ns", "90 µs", "-3 ns", "W2 (ns per untraced call)"} {
		if !strings.Contains(svg, want) {
			t.Errorf("SVG lacks %q", want)
		}
	}
}

func TestPlotRejectsForeignCSV(t *testing.T) {
	in := filepath.Join(t.TempDir(), "s.csv")
	os.WriteFile(in, []byte("a,b\n1,2\n"), 0o644)
	if _, err := readBars(in); err == nil {
		t.Error("a CSV without the summary columns was accepted")
	}
}
