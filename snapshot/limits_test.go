package snapshot

import "testing"

// /proc/PID/limits as the kernel writes it: each limit's soft and hard
// value, "unlimited" as ^0; a missing line is not read.
func TestParseLimit(t *testing.T) {
	const text = `Limit                     Soft Limit           Hard Limit           Units
Max cpu time              unlimited            unlimited            seconds
Max locked memory         65536                65536                bytes
Max address space         4294967296           unlimited            bytes
Max open files            64                   64                   files
`
	for _, c := range []struct {
		name       string
		soft, hard uint64
	}{
		{"Max open files", 64, 64}, {"Max address space", 4 << 30, ^uint64(0)}, {"Max locked memory", 65536, 65536},
	} {
		soft, hard, ok := parseLimit(text, c.name)
		if !ok || soft != c.soft || hard != c.hard {
			t.Errorf("%s: %d %d %v, want %d %d", c.name, soft, hard, ok, c.soft, c.hard)
		}
	}
	if _, _, ok := parseLimit(text, "Max processes"); ok {
		t.Error("a missing limit was read")
	}
}
