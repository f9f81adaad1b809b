package procfs

import (
	"os"
	"reflect"
	"testing"
)

func TestParseStat(t *testing.T) {
	for line, want := range map[string]Stat{
		"845 (python3) S 844 845 1 0 -1 4194560 ...": {PID: 845, Comm: "python3", State: 'S', PPID: 844, Flags: 4194560},
		"2 (kthreadd) S 0 0 0 0 -1 2129984 0 0":      {PID: 2, Comm: "kthreadd", State: 'S', PPID: 0, Flags: 2129984},
		"7 (a) b) (c) Z 1 7 7 0":                     {PID: 7, Comm: "a) b) (c", State: 'Z', PPID: 1},
		"9 (with space ) X 2 0":                      {PID: 9, Comm: "with space ", State: 'X', PPID: 2},
		"12 (\x1b[2J) R 3 0":                         {PID: 12, Comm: "\x1b[2J", State: 'R', PPID: 3},
		"42 (a) Z (b) S 1 1 1 0 -1 2097152 0 0":      {PID: 42, Comm: "a) Z (b", State: 'S', PPID: 1, Flags: PFKthread},
	} {
		got, err := ParseStat(line)
		if err != nil || got != want {
			t.Errorf("ParseStat(%q) = %+v %v, want %+v", line, got, err, want)
		}
	}
	for _, bad := range []string{"", "845 python3 S 1", "x (a) S 1", "1 (a)", "1 (a) S", "1 (a) SS 2", "1 (a) S x"} {
		if _, err := ParseStat(bad); err == nil {
			t.Errorf("ParseStat(%q) accepted", bad)
		}
	}
	if k, _ := ParseStat("2 (kthreadd) S 0 0 0 0 -1 2129984 0 0"); k.Flags&PFKthread == 0 {
		t.Errorf("kthreadd's flags %#x lack PF_KTHREAD", k.Flags)
	}
	self, err := ReadStat(os.Getpid())
	if err != nil || self.PID != os.Getpid() || self.PPID != os.Getppid() || self.Gone() {
		t.Errorf("ReadStat(self) = %+v %v", self, err)
	}
}

func TestParseStatus(t *testing.T) {
	st := ParseStatus("Name:\tpython3\nTgid:\t845\nUid:\t1000\t0\t0\t0\nGroups:\t44 65534 \nCapEff:\t0000000008000000\nbroken line\nSeccomp:\t2\n")
	if st["Name"] != "python3" {
		t.Errorf("Name = %q", st["Name"])
	}
	if n, ok := st.Int("Tgid"); !ok || n != 845 {
		t.Errorf("Tgid = %d %v", n, ok)
	}
	if _, ok := st.Int("TracerPid"); ok {
		t.Error("a missing field parsed")
	}
	if c, ok := st.Hex("CapEff"); !ok || c != 1<<27 {
		t.Errorf("CapEff = %#x %v", c, ok)
	}
	if g := st.Uints("Groups"); !reflect.DeepEqual(g, []uint32{44, 65534}) {
		t.Errorf("Groups = %v", g)
	}
	if u := st.Uints("Uid"); len(u) != 4 || u[1] != 0 {
		t.Errorf("Uid = %v", u)
	}
	self, err := ReadStatus(os.Getpid())
	if n, _ := self.Int("Tgid"); err != nil || n != os.Getpid() {
		t.Errorf("ReadStatus(self) Tgid = %d %v", n, err)
	}
}
