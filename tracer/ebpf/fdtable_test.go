package ebpf

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// fdTableSize is the kernel's size of this process's fd table.
func fdTableSize(t *testing.T) int {
	t.Helper()
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(l, "FDSize:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("no FDSize in /proc/self/status")
	return 0
}

func openFDs(t *testing.T) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(fds)
}

func TestGrowFDTable(t *testing.T) {
	before := openFDs(t)
	growFDTable()
	if n := fdTableSize(t); n < fdTableAhead {
		t.Errorf("fd table holds %d fds after growing, want at least %d", n, fdTableAhead)
	}
	// Nothing left open: ReadDir's own fd is closed again, so the counts
	// compare (a load's background growth may close one meanwhile).
	if after := openFDs(t); after > before {
		t.Errorf("%d fds open after growing the table, %d before", after, before)
	}
	if _, err := unix.FcntlInt(fdTableAhead-1, unix.F_GETFD, 0); err != unix.EBADF {
		t.Errorf("fd %d after growing the table: %v, want it closed (EBADF)", fdTableAhead-1, err)
	}
}

// Each group clones only the maps its programs use, and takes only their
// variables: every clone is an fd and every data section an mmap, per
// group.
func TestGroupSpecTakesOnlyUsedMaps(t *testing.T) {
	spec, err := loadBpf()
	if err != nil {
		t.Fatal(err)
	}
	made := map[string]*ebpf.Map{}
	for name := range spec.Maps {
		made[name] = &ebpf.Map{} // stand-ins: groupSpec only passes them on
	}
	part, replace := groupSpec(spec, []string{bpfProgCtFork}, made)
	used := map[string]bool{}
	for _, ins := range spec.Programs[bpfProgCtFork].Instructions {
		if ins.IsLoadFromMap() && ins.Reference() != "" {
			used[ins.Reference()] = true
		}
	}
	if len(used) == 0 || len(used) >= len(spec.Maps) {
		t.Fatalf("ct_fork uses %d of %d maps: not a test of the subset", len(used), len(spec.Maps))
	}
	for name := range used {
		if part.Maps[name] != spec.Maps[name] || replace[name] != made[name] {
			t.Errorf("map %s: used by ct_fork, not in its group's spec and replacements", name)
		}
	}
	if len(part.Maps) != len(used) || len(replace) != len(used) {
		t.Errorf("group has %d maps and %d replacements, ct_fork uses %d", len(part.Maps), len(replace), len(used))
	}
	for name, v := range part.Variables {
		if !used[v.SectionName] {
			t.Errorf("variable %s of unused section %s in the group", name, v.SectionName)
		}
	}
	if len(part.Programs) != 1 || part.Programs[bpfProgCtFork] != spec.Programs[bpfProgCtFork] {
		t.Errorf("group programs %v, want ct_fork's spec alone", part.Programs)
	}
}
