package scenario

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/moby/sys/mountinfo"
	"github.com/opencontainers/cgroups"
	_ "github.com/opencontainers/cgroups/devices" // registers cgroups.DevicesSetV2 (runc's device program)
	devconfig "github.com/opencontainers/cgroups/devices/config"
	"golang.org/x/sys/unix"

	"github.com/cudatrace/cudatrace/internal/privtest"
)

// ScratchPrefix starts the name of every cgroup this package makes.
const ScratchPrefix = "cudatrace-scenario-"

// Wildcard in DeviceRule.Major/Minor matches any number.
const Wildcard = -1

// DeviceRule is one device cgroup rule, as in devices.allow/deny:
// DeviceRule{'c', 7, 0, "rwm"} is "c 7:0 rwm".
type DeviceRule struct {
	Type         rune  // 'c', 'b' or 'a' (all)
	Major, Minor int64 // Wildcard for "*"
	Access       string
}

func (r DeviceRule) String() string {
	num := func(n int64) string {
		if n == Wildcard {
			return "*"
		}
		return strconv.FormatInt(n, 10)
	}
	if r.Type == 'a' {
		return "a"
	}
	return fmt.Sprintf("%c %s:%s %s", r.Type, num(r.Major), num(r.Minor), r.Access)
}

// cgroupV2 is a scratch cgroup v2 with a device program attached.
type cgroupV2 struct {
	path    string
	progIDs []uint32
}

// CgroupV2Root is the cgroup2 mount point, or "" if none is mounted.
func CgroupV2Root() string {
	root, _ := findMount(func(fstype, super string) bool { return fstype == "cgroup2" })
	return root
}

// CgroupV1DevicesRoot is the mount point of the v1 devices controller, or "".
func CgroupV1DevicesRoot() string {
	root, _ := findMount(func(fstype, super string) bool {
		if fstype != "cgroup" {
			return false
		}
		for _, opt := range strings.Split(super, ",") {
			if opt == "devices" {
				return true
			}
		}
		return false
	})
	return root
}

// findMount returns the first mount point in /proc/self/mountinfo that match
// accepts (filesystem type, super options).
func findMount(match func(fstype, super string) bool) (string, error) {
	ms, err := mountinfo.GetMounts(func(m *mountinfo.Info) (skip, stop bool) {
		ok := match(m.FSType, m.VFSOptions)
		return !ok, ok
	})
	if err != nil || len(ms) == 0 {
		return "", err
	}
	return ms[0].Mountpoint, nil
}

// scratchName is ScratchPrefix, this process's PID (so a leftover check can
// tell its own leftovers from a concurrent test binary's) and random hex.
func scratchName() string {
	var b [4]byte
	rand.Read(b[:])
	return fmt.Sprintf("%s%d-%s", ScratchPrefix, os.Getpid(), hex.EncodeToString(b[:]))
}

// newCgroupV2 makes a scratch cgroup under the cgroup2 mount and attaches
// runc's device program built from rules: allowOnly means only rules are
// allowed, otherwise everything but rules is.
func newCgroupV2(t testing.TB, rules []DeviceRule, allowOnly bool) *cgroupV2 {
	t.Helper()
	root := CgroupV2Root()
	if root == "" {
		privtest.Skip(t, "no cgroup2 mount: cannot build a cgroup v2 device scenario")
	}
	return newCgroupV2In(t, root, scratchName(), rules, allowOnly)
}

// newCgroupV2In is newCgroupV2 for a cgroup named name in parent. runc
// attaches with BPF_F_ALLOW_MULTI, so a parent's program still applies.
func newCgroupV2In(t testing.TB, parent, name string, rules []DeviceRule, allowOnly bool) *cgroupV2 {
	t.Helper()
	var ocRules []*devconfig.Rule
	if !allowOnly {
		ocRules = append(ocRules, &devconfig.Rule{Type: devconfig.WildcardDevice, Major: Wildcard, Minor: Wildcard, Permissions: "rwm", Allow: true})
	}
	for _, r := range rules {
		ocRules = append(ocRules, &devconfig.Rule{
			Type: devconfig.Type(r.Type), Major: r.Major, Minor: r.Minor,
			Permissions: devconfig.Permissions(r.Access), Allow: allowOnly,
		})
	}
	cg := &cgroupV2{path: filepath.Join(parent, name)}
	if err := os.Mkdir(cg.path, 0o755); err != nil {
		t.Fatalf("scenario: %v", err)
	}
	t.Cleanup(func() { removeCgroup(t, cg.path, true, cg.detach) })

	if err := cgroups.DevicesSetV2(cg.path, &cgroups.Resources{Devices: ocRules}); err != nil {
		t.Fatalf("scenario: attach device program to %s: %v", cg.path, err)
	}
	ids, err := attachedDevicePrograms(cg.path)
	if err != nil {
		t.Fatalf("scenario: %v", err)
	}
	if len(ids) != 1 {
		t.Fatalf("scenario: %s has %d device programs attached, want 1", cg.path, len(ids))
	}
	cg.progIDs = ids
	return cg
}

// TargetCgroupV2 makes a scratch cgroup v2 whose device program denies the
// rules, for a target to move itself into: the tracer stays outside it, so
// its own view cannot stand in for the target's. A target (a container
// runtime's job) may remove it itself once it is empty; cleanup then has
// nothing to do.
func TargetCgroupV2(t testing.TB, deny []DeviceRule) (dir string, progIDs []uint32) {
	t.Helper()
	privtest.RequireRoot(t)
	cg := newCgroupV2(t, deny, false)
	return cg.path, cg.progIDs
}

func attachedDevicePrograms(dir string) ([]uint32, error) {
	fd, err := unix.Open(dir, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer func() { _ = unix.Close(fd) }() // read-only: a failed close loses nothing
	res, err := link.QueryPrograms(link.QueryOptions{Target: fd, Attach: ebpf.AttachCGroupDevice})
	if err != nil {
		return nil, fmt.Errorf("query device programs of %s: %w", dir, err)
	}
	var ids []uint32
	for _, p := range res.Programs {
		ids = append(ids, uint32(p.ID))
	}
	return ids, nil
}

// detach removes the device programs from the cgroup. The kernel would also
// release them when the cgroup is freed, but only asynchronously; detaching
// makes "no program left" true by the time cleanup returns.
func (cg *cgroupV2) detach() error {
	fd, err := unix.Open(cg.path, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer func() { _ = unix.Close(fd) }() // read-only: a failed close loses nothing
	ids, err := attachedDevicePrograms(cg.path)
	if err != nil {
		return err
	}
	var errs []error
	for _, id := range ids {
		prog, err := ebpf.NewProgramFromID(ebpf.ProgramID(id))
		if err != nil {
			errs = append(errs, fmt.Errorf("program %d: %w", id, err))
			continue
		}
		err = link.RawDetachProgram(link.RawDetachProgramOptions{Target: fd, Program: prog, Attach: ebpf.AttachCGroupDevice})
		_ = prog.Close() // read-only: a failed close loses nothing
		if err != nil {
			errs = append(errs, fmt.Errorf("detach program %d: %w", id, err))
		}
	}
	return errors.Join(errs...)
}

// newCgroupV1 makes a scratch devices cgroup (v1) and writes deny lines.
func newCgroupV1(t testing.TB, deny []string) string {
	t.Helper()
	root := CgroupV1DevicesRoot()
	if root == "" {
		privtest.Skip(t, "the cgroup v1 devices controller is not mounted")
	}
	dir := filepath.Join(root, scratchName())
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatalf("scenario: %v", err)
	}
	t.Cleanup(func() { removeCgroup(t, dir, false, nil) })
	for _, rule := range deny {
		// One rule per write: the kernel parses a single rule per write.
		if err := os.WriteFile(filepath.Join(dir, "devices.deny"), []byte(rule), 0); err != nil {
			t.Fatalf("scenario: devices.deny %q: %v", rule, err)
		}
	}
	return dir
}

// removeCgroup kills what still runs in the cgroup, waits for it to empty,
// runs detach, and removes the directory. Failures are test errors: a
// leftover cgroup is a bug.
func removeCgroup(t testing.TB, dir string, v2 bool, detach func() error) {
	t.Helper()
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return // removed already (TargetCgroupV2): nothing is left of it
	}
	if err := killAll(dir, v2); err != nil {
		t.Errorf("scenario: %v", err)
	}
	if detach != nil {
		if err := detach(); err != nil {
			t.Errorf("scenario: %v", err)
		}
	}
	// A killed process leaves the cgroup once it has finished exiting, and
	// rmdir gives EBUSY until then; wait for that, boundedly.
	var err error
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		err = unix.Rmdir(dir)
		if err == nil || !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Errorf("scenario: remove cgroup %s: %v", dir, err)
	}
}

func killAll(dir string, v2 bool) error {
	if v2 {
		// cgroup.kill (Linux 5.14) kills atomically, even processes forking.
		if err := os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0); err == nil {
			return nil
		}
	}
	data, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return err
	}
	for _, f := range strings.Fields(string(data)) {
		if pid, err := strconv.Atoi(f); err == nil {
			_ = syscall.Kill(pid, syscall.SIGKILL) // it may have exited already
		}
	}
	return nil
}
