package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/moby/sys/mountinfo"

	"github.com/cudatrace/cudatrace/internal/privtest"
	"github.com/cudatrace/cudatrace/internal/scenario"
	"github.com/cudatrace/cudatrace/tracer/launch"
)

// Binaries built once per test binary by TestMain, in a directory every
// user can read (the setpriv tests run them as nobody).
var (
	cudatraceBin string
	fakecudaBin  string
	buildErr     error
)

func TestMain(m *testing.M) {
	launch.RunLoaderIfRequested() // in-process runs launch this binary as the loader
	dir, err := os.MkdirTemp("", "cudatrace-cli-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Chmod(dir, 0o755)
	if pre := os.Getenv(privtest.EnvPrebuilt); pre != "" {
		// The kernel matrix's guest has no Go: scripts/test-kernels.sh
		// built them.
		cudatraceBin = filepath.Join(pre, "cudatrace")
		fakecudaBin = filepath.Join(pre, "fakecuda")
	} else {
		cudatraceBin = filepath.Join(dir, "cudatrace")
		fakecudaBin = filepath.Join(dir, "fakecuda")
		buildErr = scenario.Build(cudatraceBin, "./cmd/cudatrace")
		if buildErr == nil {
			buildErr = scenario.Build(fakecudaBin, scenario.FakeCUDAPackage)
		}
	}

	var before leftovers
	if os.Geteuid() == 0 {
		before = takeLeftovers()
	}
	code := m.Run()
	os.RemoveAll(dir)
	if os.Geteuid() == 0 {
		if msgs := checkLeftovers(before); len(msgs) > 0 {
			for _, m := range msgs {
				fmt.Fprintln(os.Stderr, "left behind:", m)
			}
			code = 1
		}
	}
	os.Exit(code)
}

func needBinaries(t *testing.T) {
	t.Helper()
	if buildErr != nil {
		t.Fatal(buildErr)
	}
}

// leftovers is what cudatrace must not leave behind: its BPF programs and
// mounts, and this test binary's scratch cgroups. Each is found by its
// name, so other tools' programs and mounts on a shared host do not count.
type leftovers struct {
	progs  map[ebpf.ProgramID]string
	mounts []string
}

func takeLeftovers() leftovers {
	return leftovers{progs: ourPrograms(), mounts: ourMounts()}
}

// checkLeftovers compares with the state before the tests. Programs are
// freed asynchronously (after an RCU grace period, and other test binaries
// may be loading their own), so a new program counts only when no process
// holds it and it is still there after a grace wait. A map outlives its
// programs only when pinned or held, so programs stand for maps.
func checkLeftovers(before leftovers) []string {
	var msgs []string
	for range 50 {
		msgs = msgs[:0]
		held := heldPrograms()
		for id, name := range ourPrograms() {
			if _, old := before.progs[id]; !old && !held[id] {
				msgs = append(msgs, fmt.Sprintf("BPF program %d (%s)", id, name))
			}
		}
		if len(msgs) == 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, m := range ourMounts() {
		if !slices.Contains(before.mounts, m) {
			msgs = append(msgs, "mount "+m)
		}
	}
	mine := scenario.ScratchPrefix + strconv.Itoa(os.Getpid()) + "-"
	for _, root := range []string{scenario.CgroupV2Root(), scenario.CgroupV1DevicesRoot()} {
		if root == "" {
			continue
		}
		entries, _ := os.ReadDir(root)
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), mine) {
				msgs = append(msgs, "cgroup "+filepath.Join(root, e.Name()))
			}
		}
	}
	return msgs
}

// programPrefix starts the name of every program in bpf/cudatrace.c.
const programPrefix = "ct_"

// ourPrograms lists loaded BPF programs whose names are cudatrace's.
func ourPrograms() map[ebpf.ProgramID]string {
	out := map[ebpf.ProgramID]string{}
	var id ebpf.ProgramID
	for {
		next, err := ebpf.ProgramGetNextID(id)
		if err != nil {
			return out
		}
		id = next
		p, err := ebpf.NewProgramFromID(id)
		if err != nil {
			continue // freed meanwhile
		}
		if info, err := p.Info(); err == nil && strings.HasPrefix(info.Name, programPrefix) {
			out[id] = info.Name
		}
		p.Close()
	}
}

// heldPrograms are the BPF program IDs some process holds an fd of (a
// running tracer, possibly another test binary's).
func heldPrograms() map[ebpf.ProgramID]bool {
	held := map[ebpf.ProgramID]bool{}
	self := strconv.Itoa(os.Getpid())
	fdinfos, _ := filepath.Glob("/proc/[0-9]*/fdinfo/*")
	for _, p := range fdinfos {
		if strings.HasPrefix(p, "/proc/"+self+"/") {
			continue // ourPrograms' own fds
		}
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		for line := range strings.SplitSeq(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "prog_id:"); ok {
				if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil {
					held[ebpf.ProgramID(n)] = true
				}
			}
		}
	}
	return held
}

// ourMounts lists this mount namespace's mounts that are cudatrace's: the
// snapshot's temporary cgroup2 mount (cudatrace-cgroup2-*) and anything
// else on a cudatrace-* directory or from a cudatrace-* source (the
// scenarios' /dev, should it ever escape their private namespace).
func ourMounts() []string {
	mounts, _ := mountinfo.GetMounts(func(m *mountinfo.Info) (skip, stop bool) {
		return !strings.HasPrefix(filepath.Base(m.Mountpoint), "cudatrace-") && !strings.HasPrefix(m.Source, "cudatrace-"), false
	})
	var out []string
	for _, m := range mounts {
		out = append(out, m.Mountpoint+" "+m.FSType)
	}
	return out
}

// result is one run of the cudatrace binary.
type result struct {
	code           int
	stdout, stderr string
}

// runBinary runs cmd, which the caller built around cudatrace, and checks
// that nothing in its output looks like a crash.
func runBinary(t *testing.T, cmd *exec.Cmd) result {
	t.Helper()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err, hung := runGuarded(cmd)
	r := result{stdout: out.String(), stderr: errb.String()}
	if hung {
		t.Fatalf("%v hung (killed after %v)\nstderr:\n%s", cmd.Args, hangLimit, r.stderr)
	}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
		if ws, ok := ee.Sys().(interface{ Signaled() bool }); ok && ws.Signaled() {
			t.Fatalf("%v killed by a signal: %v\nstderr:\n%s", cmd.Args, err, r.stderr)
		}
	default:
		t.Fatalf("run %v: %v", cmd.Args, err)
	}
	if r.code == scenario.SetupFailed && strings.Contains(r.stderr, "scenario setup:") {
		t.Fatalf("scenario setup failed:\n%s", r.stderr)
	}
	noCrash(t, r.stdout+r.stderr)
	return r
}

func noCrash(t *testing.T, out string) {
	t.Helper()
	for _, bad := range []string{"panic", "goroutine "} {
		if strings.Contains(out, bad) {
			t.Errorf("output contains %q:\n%s", bad, out)
		}
	}
}

// hangLimit bounds one cudatrace run. It is no performance assertion: runs
// take well under a second; a run past this is stuck, and killing it lets
// the test report that and clean up instead of the whole binary timing out.
const hangLimit = 60 * time.Second

// runGuarded runs cmd, killing it if it outlives hangLimit.
func runGuarded(cmd *exec.Cmd) (err error, hung bool) {
	if err := cmd.Start(); err != nil {
		return err, false
	}
	return waitGuarded(cmd)
}

func waitGuarded(cmd *exec.Cmd) (err error, hung bool) {
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err, false
	case <-time.After(hangLimit):
		cmd.Process.Kill()
		return <-done, true
	}
}
