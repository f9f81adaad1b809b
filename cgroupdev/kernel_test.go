package cgroupdev

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/opencontainers/cgroups"
	_ "github.com/opencontainers/cgroups/devices" // installs runc's real DevicesSetV2
	"github.com/opencontainers/cgroups/devices/config"
	"golang.org/x/sys/unix"

	"github.com/cudatrace/cudatrace/internal/privtest"
	"github.com/cudatrace/cudatrace/snapshot"
)

// The privileged tests compare this package with the kernel itself: a
// helper process sits in a scratch cgroup and performs real opens and
// mknods of device nodes; EPERM means the cgroup denied the access.

const (
	helperEnv   = "CGROUPDEV_TEST_HELPER"
	cgroup2Root = "/sys/fs/cgroup/unified"
	devicesV1   = "/sys/fs/cgroup/devices"
)

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "1" {
		helperMain()
		return
	}
	os.Exit(m.Run())
}

// helperMain answers one request per line on stdin with an errno number:
//
//	open PATH FLAGS
//	mknod PATH b|c MAJOR MINOR   (the node is removed again on success)
func helperMain() {
	in := bufio.NewScanner(os.Stdin)
	out := bufio.NewWriter(os.Stdout)
	for in.Scan() {
		f := strings.Fields(in.Text())
		var err error
		switch {
		case len(f) == 3 && f[0] == "open":
			flags, _ := strconv.ParseUint(f[2], 10, 64)
			var fd int
			fd, err = unix.Open(f[1], int(flags)|unix.O_CLOEXEC|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
			if err == nil {
				unix.Close(fd)
			}
		case len(f) == 5 && f[0] == "mknod":
			maj, _ := strconv.ParseUint(f[3], 10, 32)
			min, _ := strconv.ParseUint(f[4], 10, 32)
			mode := uint32(unix.S_IFCHR)
			if f[2] == "b" {
				mode = unix.S_IFBLK
			}
			err = unix.Mknod(f[1], mode|0o600, int(unix.Mkdev(uint32(maj), uint32(min))))
			if err == nil {
				unix.Unlink(f[1])
			}
		default:
			err = unix.EINVAL
		}
		var errno unix.Errno
		if err != nil && !errors.As(err, &errno) {
			errno = unix.EIO
		}
		fmt.Fprintf(out, "%d\n", int(errno))
		out.Flush()
	}
}

type helper struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
}

func startHelper(t *testing.T) *helper {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=1")
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &helper{cmd: cmd, in: in, out: bufio.NewReader(out)}
	t.Cleanup(func() {
		in.Close()
		cmd.Process.Kill()
		cmd.Wait()
	})
	return h
}

func (h *helper) do(t *testing.T, format string, args ...any) unix.Errno {
	t.Helper()
	if _, err := fmt.Fprintf(h.in, format+"\n", args...); err != nil {
		t.Fatalf("helper: %v", err)
	}
	line, err := h.out.ReadString('\n')
	if err != nil {
		t.Fatalf("helper: %v", err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatalf("helper said %q", line)
	}
	return unix.Errno(n)
}

func (h *helper) joinCgroup(t *testing.T, dir string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(h.cmd.Process.Pid)), 0); err != nil {
		t.Fatalf("move helper into %s: %v", dir, err)
	}
}

// nodes makes device nodes on demand in a directory that allows them.
type nodes struct {
	dir  string
	made map[string]bool
	n    int
}

func newNodes(t *testing.T) *nodes {
	t.Helper()
	dir := t.TempDir()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	if st.Flags&unix.ST_NODEV != 0 {
		privtest.Skip(t, dir+" is mounted nodev; device nodes there cannot be opened")
	}
	return &nodes{dir: dir, made: map[string]bool{}}
}

func (n *nodes) path(t *testing.T, typ DevType, maj, min uint32) string {
	t.Helper()
	p := filepath.Join(n.dir, fmt.Sprintf("%s-%d-%d", typ, maj, min))
	if !n.made[p] {
		mode := uint32(unix.S_IFCHR)
		if typ == TypeBlock {
			mode = unix.S_IFBLK
		}
		if err := unix.Mknod(p, mode|0o600, int(unix.Mkdev(maj, min))); err != nil {
			t.Fatalf("mknod %s: %v", p, err)
		}
		n.made[p] = true
	}
	return p
}

func (n *nodes) fresh() string {
	n.n++
	return filepath.Join(n.dir, "new-"+strconv.Itoa(n.n))
}

// openFlags are the open modes tried; AccessForOpen says what each checks.
var openFlags = []uint64{unix.O_RDONLY, unix.O_WRONLY, unix.O_RDWR, unix.O_RDONLY | unix.O_TRUNC, unix.O_WRONLY | unix.O_TRUNC, 3, unix.O_PATH}

// kernelCase performs one random access in the helper and returns the
// checks the kernel makes for it (one request per check; none for O_PATH)
// and whether the kernel allowed it.
func kernelCase(t *testing.T, rng *rand.Rand, h *helper, n *nodes) ([]Request, string, bool) {
	t.Helper()
	req := randRequest(rng)
	var errno unix.Errno
	var what string
	var checks []Access
	if rng.IntN(6) == 0 {
		checks = []Access{AccessMknod}
		what = fmt.Sprintf("mknod %s %d:%d", req.Type, req.Major, req.Minor)
		errno = h.do(t, "mknod %s %s %d %d", n.fresh(), req.Type, req.Major, req.Minor)
	} else {
		flags := openFlags[rng.IntN(len(openFlags))]
		checks = OpenChecks(req.Type, flags)
		what = fmt.Sprintf("open %s %d:%d flags %#o", req.Type, req.Major, req.Minor, flags)
		errno = h.do(t, "open %s %d", n.path(t, req.Type, req.Major, req.Minor), flags)
	}
	var reqs []Request
	for _, a := range checks {
		r := req
		r.Access = a
		reqs = append(reqs, r)
	}
	switch errno {
	case 0, unix.ENXIO, unix.ENODEV:
		return reqs, what, true // passed the cgroup checks; the driver (or its absence) answered
	case unix.EPERM:
		return reqs, what, false
	}
	t.Fatalf("%s: unexpected errno %v (%d)", what, errno, int(errno))
	return reqs, what, false
}

func mkScratch(t *testing.T, root string) string {
	t.Helper()
	dir := filepath.Join(root, fmt.Sprintf("cgroupdev-test-%d-%d", os.Getpid(), rand.Uint32()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatalf("create scratch cgroup: %v", err)
	}
	t.Cleanup(func() {
		if err := os.Remove(dir); err != nil {
			t.Errorf("remove scratch cgroup: %v", err)
		}
	})
	return dir
}

// detachAll removes every device program attached directly to dir.
func detachAll(dir string) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	res, err := link.QueryPrograms(link.QueryOptions{Target: fd, Attach: ebpf.AttachCGroupDevice})
	if err != nil {
		return err
	}
	var errs []error
	for _, ap := range res.Programs {
		p, err := ebpf.NewProgramFromID(ap.ID)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		errs = append(errs, link.RawDetachProgram(link.RawDetachProgramOptions{Target: fd, Program: p, Attach: ebpf.AttachCGroupDevice}))
		p.Close()
	}
	return errors.Join(errs...)
}

func attachInsns(t *testing.T, dir string, insns asm.Instructions) {
	t.Helper()
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.CGroupDevice, Instructions: insns, License: "GPL"})
	if err != nil {
		t.Fatalf("load device program: %v", err)
	}
	defer prog.Close() // the attachment keeps it alive
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := link.RawAttachProgram(link.RawAttachProgramOptions{Target: fd, Program: prog, Attach: ebpf.AttachCGroupDevice, Flags: unix.BPF_F_ALLOW_MULTI}); err != nil {
		t.Fatalf("attach device program to %s: %v", dir, err)
	}
}

type progKind int

const (
	kindRunc progKind = iota
	kindSystemd
	kindLXC
)

func (k progKind) String() string { return [...]string{"runc", "systemd", "lxc"}[k] }

// attachRandom builds a random program of kind k and attaches it to dir.
// runc's programs come from runc's own generator through DevicesSetV2
// (which replaces whatever is attached to dir, so attach runc first).
// It reports false when runc refuses the rule set.
func attachRandom(t *testing.T, rng *rand.Rand, k progKind, dir string) (string, bool) {
	t.Helper()
	switch k {
	case kindRunc:
		var rules []*config.Rule
		if rng.IntN(3) == 0 {
			rules = append(rules, &config.Rule{Type: config.WildcardDevice, Major: -1, Minor: -1, Permissions: "rwm", Allow: rng.IntN(2) == 0})
		}
		for _, r := range randRules(rng, rng.IntN(7), false, true) {
			typ := config.CharDevice
			if r.Type == TypeBlock {
				typ = config.BlockDevice
			}
			rules = append(rules, &config.Rule{Type: typ, Major: r.Major, Minor: r.Minor, Permissions: config.Permissions(r.Access.String()), Allow: r.Allow})
		}
		if err := cgroups.DevicesSetV2(dir, &cgroups.Resources{Devices: rules}); err != nil {
			return "", false
		}
		var desc []string
		for _, r := range rules {
			desc = append(desc, fmt.Sprintf("%v:%s", r.Allow, r.CgroupString()))
		}
		return "runc " + strings.Join(desc, ", "), true
	case kindSystemd:
		rules := systemdRules(randRules(rng, rng.IntN(7), false, false))
		deny := len(rules) == 0 && rng.IntN(2) == 0
		attachInsns(t, dir, systemdProgram(rules, deny))
		return fmt.Sprintf("systemd %v strict=%v", rules, deny), true
	default:
		rules := randRules(rng, rng.IntN(7), true, true)
		def := rng.IntN(2) == 0
		attachInsns(t, dir, lxcProgram(rules, def))
		return fmt.Sprintf("lxc %v denylist=%v", rules, def), true
	}
}

// differentialSeeds are always run: 3, the first seed, and seeds that once
// found a program shape DecodeRules did not know (the verifier removing a
// rule that an earlier one makes unreachable). A few random seeds join
// them on every run.
var differentialSeeds = []uint64{3, 1007, 1025, 1044}

// TestKernelV2Differential is the centrepiece: random rule sets in the
// shapes runc, systemd and LXC generate, one or two programs at a time
// (in the cgroup itself and inherited from its parent), judged by the
// kernel through real opens and mknods, and by EvaluateV2 on the program
// bytes snapshot.QueryDevicePrograms reads back. Several seeds run, so
// that a shape the decoder misses fails the build rather than a later run;
// CGROUPDEV_SEED runs that one seed alone.
func TestKernelV2Differential(t *testing.T) {
	privtest.RequireRoot(t)
	if !isCgroup2(cgroup2Root) {
		privtest.Skip(t, cgroup2Root+" is not a cgroup2 mount")
	}
	unix.Setrlimit(unix.RLIMIT_MEMLOCK, &unix.Rlimit{Cur: unix.RLIM_INFINITY, Max: unix.RLIM_INFINITY})

	seeds := slices.Clone(differentialSeeds)
	if s := os.Getenv("CGROUPDEV_SEED"); s != "" {
		seeds = []uint64{testSeed(t, 0)}
	} else {
		for range 2 {
			seeds = append(seeds, 10_000+uint64(rand.IntN(1_000_000)))
		}
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Logf("seed %d (replay: CGROUPDEV_SEED=%d go test ./cgroupdev -run KernelV2)", seed, seed)
			kernelV2Differential(t, seed)
		})
	}
}

func kernelV2Differential(t *testing.T, seed uint64) {
	parent := mkScratch(t, cgroup2Root)
	child := mkScratch(t, parent)
	// Runs before the rmdirs (cleanups run last-in first-out).
	t.Cleanup(func() {
		for _, d := range []string{child, parent} {
			if err := detachAll(d); err != nil {
				t.Errorf("detach programs from %s: %v", d, err)
			}
		}
	})
	n := newNodes(t)
	h := startHelper(t)
	h.joinCgroup(t, child)

	rng := newRand(seed)
	relParent := "/" + filepath.Base(parent)
	relChild := relParent + "/" + filepath.Base(child)
	var cases, denied, mismatches, refused int
	var shapes [3]int
	const scenarios = 240
	for s := 0; s < scenarios; s++ {
		if err := errors.Join(detachAll(child), detachAll(parent)); err != nil {
			t.Fatal(err)
		}
		layout := s % 4 // 0: one in child, 1: one in parent, 2: two in child, 3: parent + child
		k1, k2 := progKind(rng.IntN(3)), progKind(rng.IntN(3))
		if layout == 2 {
			if k2 == kindRunc { // runc replaces what is there: attach it first
				k1, k2 = k2, k1
			}
			if k2 == kindRunc {
				k2 = kindLXC
			}
		}
		var descs []string
		wantAt := map[string]int{}
		place := func(k progKind, dir, rel string) bool {
			d, ok := attachRandom(t, rng, k, dir)
			if ok {
				descs = append(descs, rel+": "+d)
				wantAt[rel]++
				shapes[k]++
			}
			return ok
		}
		var ok bool
		switch layout {
		case 0:
			ok = place(k1, child, relChild)
		case 1:
			ok = place(k1, parent, relParent)
		case 2:
			ok = place(k1, child, relChild) && place(k2, child, relChild)
		case 3:
			ok = place(k1, parent, relParent) && place(k2, child, relChild)
		}
		if !ok {
			refused++
			continue
		}

		progs, err := snapshot.QueryDevicePrograms(child, cgroup2Root)
		if err != nil {
			t.Fatalf("QueryDevicePrograms: %v", err)
		}
		emulated := asPrograms(progs)
		gotAt := map[string]int{}
		for _, p := range progs {
			gotAt[p.AttachedTo]++
			if len(p.Instructions) == 0 || p.ID == 0 {
				t.Fatalf("program %+v has no id or instructions", p)
			}
			if p.AttachFlags&unix.BPF_F_ALLOW_MULTI == 0 {
				t.Errorf("program %d attach flags %#x, want ALLOW_MULTI", p.ID, p.AttachFlags)
			}
		}
		if fmt.Sprint(gotAt) != fmt.Sprint(wantAt) {
			t.Fatalf("scenario %d: effective programs attached at %v, want %v", s, gotAt, wantAt)
		}
		// Every generated shape must decode, and its rules must agree too.
		decoded := make([][]Rule, len(progs))
		defaults := make([]bool, len(progs))
		for i, p := range progs {
			var ok bool
			decoded[i], defaults[i], ok = DecodeRules(p.Instructions)
			if !ok {
				t.Errorf("scenario %d: program %d (%s) not decoded", s, p.ID, strings.Join(descs, "; "))
			}
		}

		for c := 0; c < 40; c++ {
			reqs, what, kernel := kernelCase(t, rng, h, n)
			cases++
			if !kernel {
				denied++
			}
			// Allowed when every check passes (no checks: O_PATH).
			model, byRules := true, true
			var deniedBy []uint32
			for _, req := range reqs {
				ok, by, errs := EvaluateV2(emulated, req)
				if len(errs) > 0 {
					t.Fatalf("EvaluateV2: %v", errs)
				}
				model = model && ok
				deniedBy = append(deniedBy, by...)
				for i := range progs {
					if a, _ := EvaluateRules(decoded[i], defaults[i], req); !a {
						byRules = false
					}
				}
			}
			if model != kernel || byRules != kernel {
				mismatches++
				if mismatches <= 10 {
					t.Errorf("scenario %d [%s]: %s (checks %+v): kernel allowed=%v, EvaluateV2=%v (denied by %v), decoded rules=%v",
						s, strings.Join(descs, "; "), what, reqs, kernel, model, deniedBy, byRules)
				}
			}
		}
	}
	t.Logf("%d kernel cases over %d scenarios (%d runc, %d systemd, %d lxc programs; %d rule sets runc refused): %d denied by the kernel, %d mismatches",
		cases, scenarios-refused, shapes[kindRunc], shapes[kindSystemd], shapes[kindLXC], refused, denied, mismatches)
	if cases < 5000 {
		t.Errorf("only %d cases ran", cases)
	}
	if denied == 0 || denied == cases {
		t.Errorf("kernel verdicts were all the same (%d denied of %d): the test is not discriminating", denied, cases)
	}
}

// TestKernelV1 compares ParseV1List+EvaluateV1 with the cgroup v1 devices
// controller: random allow/deny writes on a default-deny scratch cgroup,
// devices.list read back, and real accesses from a helper inside it.
func TestKernelV1(t *testing.T) {
	privtest.RequireRoot(t)
	if _, err := os.Stat(filepath.Join(devicesV1, "devices.list")); err != nil {
		privtest.Skip(t, "no cgroup v1 devices controller at "+devicesV1)
	}
	dir := mkScratch(t, devicesV1)
	n := newNodes(t)
	h := startHelper(t)
	h.joinCgroup(t, dir)
	write := func(file, line string) error {
		return os.WriteFile(filepath.Join(dir, file), []byte(line), 0)
	}
	rng := newRand(testSeed(t, 4))
	var cases, denied, mismatches int
	for round := 0; round < 40; round++ {
		if err := write("devices.deny", "a"); err != nil { // default deny, no exceptions
			t.Fatalf("reset devices cgroup: %v", err)
		}
		if round%10 == 9 {
			if err := write("devices.allow", "a"); err != nil {
				t.Fatal(err)
			}
		}
		for _, r := range randRules(rng, rng.IntN(7), false, true) {
			file := "devices.allow"
			if !r.Allow {
				file = "devices.deny"
			}
			line := V1Rule{Type: r.Type, Major: r.Major, Minor: r.Minor, Access: r.Access}.String()
			if err := write(file, line); err != nil {
				t.Fatalf("write %q to %s: %v", line, file, err)
			}
		}
		text, err := os.ReadFile(filepath.Join(dir, "devices.list"))
		if err != nil {
			t.Fatal(err)
		}
		rules, err := ParseV1List(string(text))
		if err != nil {
			t.Fatalf("kernel's devices.list does not parse: %v", err)
		}
		if round%10 == 9 {
			// Allow-by-default: the list shows only "a *:* rwm" and hides
			// deny exceptions, so only check what it shows.
			if len(rules) != 1 || rules[0].String() != "a *:* rwm" {
				t.Fatalf("allow-all cgroup lists %q", text)
			}
			continue
		}
		for c := 0; c < 25; c++ {
			reqs, what, kernel := kernelCase(t, rng, h, n)
			cases++
			if !kernel {
				denied++
			}
			model := true
			for _, req := range reqs {
				ok, _ := EvaluateV1(rules, req)
				model = model && ok
			}
			if model != kernel {
				mismatches++
				t.Errorf("devices.list %q: %s: kernel allowed=%v, EvaluateV1=%v", text, what, kernel, model)
			}
		}
	}
	t.Logf("%d v1 kernel cases: %d denied by the kernel, %d mismatches", cases, denied, mismatches)
	if denied == 0 || denied == cases {
		t.Errorf("kernel verdicts were all the same (%d denied of %d)", denied, cases)
	}
}

func TestQueryDeviceProgramsEdges(t *testing.T) {
	privtest.RequireRoot(t)
	if !isCgroup2(cgroup2Root) {
		privtest.Skip(t, cgroup2Root+" is not a cgroup2 mount")
	}
	dir := mkScratch(t, cgroup2Root)
	progs, err := snapshot.QueryDevicePrograms(dir, "")
	if err != nil || len(progs) != 0 {
		t.Fatalf("empty cgroup: %v %v", progs, err)
	}
	if _, err := snapshot.QueryDevicePrograms(dir, "/sys/fs/cgroup/devices"); err == nil {
		t.Error("a root that does not contain the cgroup must be an error")
	}
	if _, err := snapshot.QueryDevicePrograms(t.TempDir(), ""); err == nil || !strings.Contains(err.Error(), "not on a cgroup2") {
		t.Errorf("non-cgroup directory: %v", err)
	}
	// The root found by walking up names the program's cgroup correctly.
	t.Cleanup(func() { detachAll(dir) })
	attachInsns(t, dir, systemdProgram([]Rule{{Type: TypeChar, Major: 195, Minor: -1, Access: AccessAll, Allow: true}}, false))
	progs, err = snapshot.QueryDevicePrograms(dir, "")
	if err != nil || len(progs) != 1 || progs[0].AttachedTo != "/"+filepath.Base(dir) {
		t.Fatalf("got %+v %v", progs, err)
	}
	rules, def, ok := DecodeRules(progs[0].Instructions)
	if !ok || def || SummariseRules(rules, def) != "allows c 195:* rwm; denies everything else" {
		t.Errorf("decoded %v %v %v", rules, def, ok)
	}
}

// asPrograms is what EvaluateV2 needs of programs read from the kernel.
func asPrograms(ps []snapshot.DeviceProgram) []Program {
	out := make([]Program, len(ps))
	for i, p := range ps {
		out[i] = Program{ID: p.ID, Name: p.Name, AttachedTo: p.AttachedTo, Instructions: p.Instructions}
	}
	return out
}

func isCgroup2(path string) bool {
	var st unix.Statfs_t
	return unix.Statfs(path, &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC
}

// testSeed is def, or CGROUPDEV_SEED when set, so that more random cases
// can be run without editing the test; the seed is logged for replay.
func testSeed(t *testing.T, def uint64) uint64 {
	if s := os.Getenv("CGROUPDEV_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("CGROUPDEV_SEED=%q: %v", s, err)
		}
		def = n
	}
	t.Logf("seed %d (set CGROUPDEV_SEED to change)", def)
	return def
}
