package ebpf

import (
	"slices"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/cudatrace/cudatrace/internal/privtest"
)

// sweep takes one process's sites out of a fold map holding many
// processes' (more than one batch's worth), passing on the counts past the
// threshold, and leaves the others' in place.
func TestSweepTakesOneProcess(t *testing.T) {
	privtest.RequireRoot(t)
	privtest.Deadline(t)
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Hash, KeySize: 8, ValueSize: 8, MaxEntries: 4096})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	type site struct{ Tgid, Request uint32 }
	const sites = 3 * sweepBatch
	for i := range sites {
		// PID 7 has every fifth site; its count is i, 3 past the threshold of i-3.
		k := site{Tgid: uint32(100 + i%4), Request: uint32(i)}
		if i%5 == 0 {
			k.Tgid = 7
		}
		if err := m.Put(k, uint64(i)); err != nil {
			t.Fatal(err)
		}
	}
	got := map[uint32]uint64{}
	sweep(m, 3, 7, func(k site) uint32 { return k.Tgid }, func(k site, n uint64) { got[k.Request] = n })
	var want []uint32
	for i := 0; i < sites; i += 5 {
		if i > 3 {
			want = append(want, uint32(i))
			if got[uint32(i)] != uint64(i-3) {
				t.Errorf("site %d: %d past the threshold, want %d", i, got[uint32(i)], i-3)
			}
		}
	}
	keys := make([]uint32, 0, len(got))
	for k := range got {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if !slices.Equal(keys, want) {
		t.Errorf("sites passed on %v, want %v", keys, want)
	}
	var k site
	var n uint64
	left := 0
	for it := m.Iterate(); it.Next(&k, &n); left++ {
		if k.Tgid == 7 {
			t.Errorf("site %+v of PID 7 left in the map", k)
		}
	}
	if wantLeft := sites - (sites+4)/5; left != wantLeft {
		t.Errorf("%d sites left, want the other processes' %d", left, wantLeft)
	}
}
