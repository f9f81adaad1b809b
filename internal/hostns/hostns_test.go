package hostns

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/cudatrace/cudatrace/internal/privtest"
)

// helperEnv holds, in the helper, the PID whose cgroup namespace stands
// for init's: this sandbox may deny access to its PID 1's.
const helperEnv = "CUDATRACE_HOSTNS_HELPER_INIT"

// As a helper: join, then print this process's unified cgroup path.
func TestMain(m *testing.M) {
	if pid := os.Getenv(helperEnv); pid != "" {
		initNS = procRoot + "/" + pid + "/ns/cgroup"
		if err := JoinInitCgroupNamespace(); err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		fmt.Println(unifiedPath("/proc/self/cgroup"))
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func unifiedPath(file string) string {
	f, err := os.Open(file)
	if err != nil {
		return "unreadable: " + err.Error()
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if p, ok := strings.CutPrefix(sc.Text(), "0::"); ok {
			return p
		}
	}
	return "no cgroup2 line"
}

// A process in a cgroup namespace of its own, rooted at its cgroup, sees
// its path as "/"; joined to init's namespace it sees the host's path, the
// one a snapshot must read. In init's namespace already, nothing changes.
func TestJoinInitCgroupNamespace(t *testing.T) {
	privtest.RequireRoot(t)
	mounts, err := mountinfo.GetMounts(mountinfo.FSTypeFilter("cgroup2"))
	if err != nil || len(mounts) == 0 {
		privtest.Skip(t, "no cgroup2 hierarchy mounted")
	}
	name := fmt.Sprintf("cudatrace-hostns-test-%08x", rand.Uint32())
	dir := filepath.Join(mounts[0].Mountpoint, name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(dir) })
	cg, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer cg.Close()
	// The path as the test's own namespace names it.
	want := strings.TrimSuffix(unifiedPath("/proc/self/cgroup"), "/") + "/" + name

	for _, tc := range []struct {
		name  string
		flags uintptr
	}{{"own-namespace", unix.CLONE_NEWCGROUP}, {"init-namespace", 0}} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.CommandContext(privtest.Deadline(t), os.Args[0])
			cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d", helperEnv, os.Getpid()))
			cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: tc.flags, UseCgroupFD: true, CgroupFD: int(cg.Fd())}
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("helper: %v\n%s", err, out)
			}
			if got := strings.TrimSpace(string(out)); got != want {
				t.Errorf("after joining, the helper's cgroup reads %q, want %q", got, want)
			}
		})
	}
}
