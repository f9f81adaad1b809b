package scenario

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/cudatrace/cudatrace/internal/privtest"
)

// fakecuda under strace shows the same calls on the NVIDIA nodes as libcuda
// did in the H200 recordings: the same syscall names (legacy stat, unlink,
// symlink) and the same nvidia-uvm sequence, including the failure path.
func TestFakeCUDAMatchesRecordings(t *testing.T) {
	privtest.RequireRoot(t)
	strace, err := exec.LookPath("strace")
	if err != nil {
		privtest.Skip(t, "needs strace: "+err.Error())
	}
	cases := []struct {
		recording string
		env       Env
	}{
		{"cuinit-ok-root.strace", Env{Nodes: StandInNodes(), ProcDevices: StandInProcDevices}},
		{"cuinit-deny-uvm.strace", Env{Nodes: StandInNodes(), ProcDevices: StandInProcDevices,
			CgroupV2Deny: []DeviceRule{{'c', UVMMajor, Wildcard, "rwm"}}}},
	}
	for _, tc := range cases {
		t.Run(tc.recording, func(t *testing.T) {
			want := nodeCalls(t, filepath.Join(ModuleRoot(t), "testdata/strace/h200", tc.recording))
			out := filepath.Join(sharedTempDir(t, "cudatrace-strace-"), "fakecuda.strace")
			tc.env.Prepare(t)
			cmd := tc.env.Command(t, strace, "-f", "-qq", "-yy", "-o", out,
				"-e", "trace=%file,ioctl,mknodat,mknod", FakeCUDA(t), "--proc-devices", tc.env.ProcDevicesPath())
			if b, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("%v\n%s", err, b)
			}
			got := nodeCalls(t, out)

			names := func(calls []call) []string {
				var out []string
				for _, c := range calls {
					if !slices.Contains(out, c.name) {
						out = append(out, c.name)
					}
				}
				slices.Sort(out)
				return out
			}
			if g, w := names(got), names(want); !slices.Equal(g, w) {
				t.Errorf("syscalls on NVIDIA nodes: got %v, recorded %v", g, w)
			}
			uvm := func(calls []call) []string {
				var out []string
				for _, c := range calls {
					if c.path == "/dev/nvidia-uvm" || c.path == "fd -1" {
						out = append(out, c.String())
					}
				}
				return out
			}
			if g, w := uvm(got), uvm(want); len(w) == 0 || !slices.Equal(g, w) {
				t.Errorf("nvidia-uvm calls:\n got      %q\n recorded %q", g, w)
			}
		})
	}
}

type call struct{ name, path, result string }

func (c call) String() string { return c.name + " " + c.path + " " + c.result }

var straceLine = regexp.MustCompile(`^(?:\d+\s+)?(?:[\d:.]+\s+)?(\w+)\((.*)\)\s+= (-1 (E\w+)|\S+)`)

// nodeCalls reads an strace log and keeps the calls on /dev/nvidia* and
// /dev/char/* paths, and ioctls on fd -1 (libcuda's teardown after a failed
// open). /dev/char names are reduced to the directory, as majors differ.
func nodeCalls(t *testing.T, file string) []call {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var calls []call
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		m := straceLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		c := call{name: m[1], result: "ok"}
		if m[4] != "" {
			c.result = m[4]
		}
		args := m[2]
		switch {
		case c.name == "ioctl" && strings.HasPrefix(args, "-1,"):
			c.path = "fd -1"
		case c.name == "ioctl" && strings.Contains(strings.SplitN(args, ",", 2)[0], "</dev/nvidia"):
			c.path = "fd " + strings.SplitN(strings.SplitN(args, "<", 2)[1], "<", 2)[0]
		default:
			q := regexp.MustCompile(`"([^"]*)"`).FindAllStringSubmatch(args, -1)
			if len(q) == 0 {
				continue
			}
			c.path = q[len(q)-1][1] // symlink: the link, not its target
		}
		switch {
		case strings.HasPrefix(c.path, "/dev/char/"):
			c.path = "/dev/char/"
		case strings.HasPrefix(c.path, "/dev/nvidia"), strings.HasPrefix(c.path, "fd "):
		default:
			continue
		}
		calls = append(calls, c)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(calls) == 0 {
		t.Fatalf("%s: no calls on NVIDIA nodes", file)
	}
	return calls
}
