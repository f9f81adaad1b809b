package scenario

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/cudatrace/cudatrace/internal/privtest"
)

// An Env whose target is still running when the test ends leaves nothing
// behind: no scratch cgroup (v1 or v2), no device program, no temp file.
func TestNothingLeftBehind(t *testing.T) {
	privtest.RequireRoot(t)
	var v2Path, v1Path, procPath string
	var ids []uint32
	t.Run("scenario", func(t *testing.T) {
		env := &Env{
			Nodes:        StandInNodes(),
			ProcDevices:  StandInProcDevices,
			CgroupV2Deny: []DeviceRule{{'c', UVMMajor, UVMMinor, "rwm"}},
			CgroupV1Deny: []string{"c 1:5 rwm"},
		}
		// Loops forever: cleanup has to kill it before it can remove the cgroups.
		cmd, _, _ := startFake(t, env, "--loop", "0", "--interval", "10ms")
		v2Path, v1Path, procPath, ids = env.CgroupV2Path(), env.CgroupV1Path(), env.ProcDevicesPath(), env.ProgramIDs()
		for _, p := range []string{v2Path, v1Path} {
			data, err := os.ReadFile(filepath.Join(p, "cgroup.procs"))
			if err != nil {
				t.Fatal(err)
			}
			// The target may not have joined yet; it is enough that the
			// cgroup exists. If it has, it is the command's PID.
			if f := strings.Fields(string(data)); len(f) > 0 && f[0] != strconv.Itoa(cmd.Process.Pid) {
				t.Errorf("%s holds %v, want only %d", p, f, cmd.Process.Pid)
			}
		}
	})
	if v2Path == "" || v1Path == "" || procPath == "" || len(ids) == 0 {
		t.Fatalf("scenario did not build: v2 %q v1 %q proc %q ids %v", v2Path, v1Path, procPath, ids)
	}
	for _, p := range []string{v2Path, v1Path, procPath, filepath.Dir(procPath)} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left behind (%v)", p, err)
		}
	}
	mine := ScratchPrefix + strconv.Itoa(os.Getpid()) + "-"
	for _, root := range []string{CgroupV2Root(), CgroupV1DevicesRoot()} {
		entries, err := os.ReadDir(root)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), mine) {
				t.Errorf("scratch cgroup %s left behind", filepath.Join(root, e.Name()))
			}
		}
	}
	for _, id := range ids {
		prog, err := ebpf.NewProgramFromID(ebpf.ProgramID(id))
		if err == nil {
			prog.Close()
			t.Errorf("device program %d left behind", id)
		} else if !errors.Is(err, os.ErrNotExist) {
			t.Errorf("program %d: %v", id, err)
		}
	}
}
