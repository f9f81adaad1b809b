package ebpf

import (
	"slices"
	"testing"
)

// Every program is loaded exactly once, and no CPU gets more than its
// share plus one program (the greedy split's bound).
func TestBalanceSplitsPrograms(t *testing.T) {
	spec, err := loadBpf()
	if err != nil {
		t.Fatal(err)
	}
	total, largest := 0, 0
	for _, p := range spec.Programs {
		total += len(p.Instructions)
		largest = max(largest, len(p.Instructions))
	}
	for n := 1; n <= len(spec.Programs); n++ {
		parts := balance(spec, n)
		if len(parts) != n {
			t.Fatalf("n=%d: %d groups", n, len(parts))
		}
		var seen []string
		for _, g := range parts {
			if len(g) == 0 {
				t.Errorf("n=%d: an empty group: %v", n, parts)
			}
			load := 0
			for _, name := range g {
				load += len(spec.Programs[name].Instructions)
			}
			if load > total/n+largest {
				t.Errorf("n=%d: a group of %d instructions (total %d, largest program %d): %v", n, load, total, largest, parts)
			}
			seen = append(seen, g...)
		}
		slices.Sort(seen)
		var want []string
		for name := range spec.Programs {
			want = append(want, name)
		}
		slices.Sort(want)
		if !slices.Equal(seen, want) {
			t.Errorf("n=%d: programs %v, want each of %v once", n, seen, want)
		}
	}
}
