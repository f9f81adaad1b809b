package snapshot

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/cudatrace/cudatrace/internal/privtest"
)

func TestNodeName(t *testing.T) {
	long := strings.Repeat("a", 251) + ".bc"
	for _, tc := range []struct {
		env      string
		otherUTS bool
		want     string
	}{
		{"gpu-node-17.example.com", true, "gpu-node-17.example.com"}, // a pod: the node
		{"gpu-node-17", false, "host"},                               // not a pod: NODE_NAME is someone else's (Jenkins)
		{"", true, "host"},
		{"Bad_Name", true, "host"},
		{"node\x1b[31m", true, "host"}, // nothing unescaped reaches a terminal
		{"-node", true, "host"},
		{"node.", true, "host"},
		{long, true, "host"},
		{long[:253], true, long[:253]},
	} {
		if got := nodeName(tc.env, tc.otherUTS, "host"); got != tc.want {
			t.Errorf("nodeName(%q, %v) = %q, want %q", tc.env, tc.otherUTS, got, tc.want)
		}
	}
}

// nodeNameHelperEnv holds, in the helper that TestMain runs, the PID whose
// UTS namespace stands for PID 1's: the helper, in one of its own (a
// pod's), prints NodeName.
const nodeNameHelperEnv = "CUDATRACE_SNAPSHOT_NODENAME_HELPER"

func TestNodeNameOwnUTS(t *testing.T) {
	privtest.RequireRoot(t)
	saved := initUTS
	initUTS = "/proc/self/ns/uts"
	host, _ := os.Hostname()
	t.Setenv("NODE_NAME", "node-a")
	if got := NodeName(); got != host {
		t.Errorf("in init's UTS namespace NodeName = %q, want the hostname %q", got, host)
	}
	initUTS = saved
	cmd := exec.CommandContext(privtest.Deadline(t), os.Args[0])
	cmd.Env = append(os.Environ(), nodeNameHelperEnv+"="+strconv.Itoa(os.Getpid()), "NODE_NAME=node-b")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUTS}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	if got := strings.TrimSpace(string(out)); got != "node-b" {
		t.Errorf("in a UTS namespace of its own NodeName = %q, want NODE_NAME's node-b", got)
	}
}
