// Package deploy_test runs deploy/cudatrace-health.sh and the Slurm
// wrappers with a fake cudatrace and a fake scontrol on PATH, and checks
// what they pass to scontrol and how they exit.
package deploy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cudatrace/cudatrace/doctor"
	"github.com/cudatrace/cudatrace/render"
)

// doctorJSON is what `cudatrace doctor --format json` prints for checks,
// through doctor's own renderer.
func doctorJSON(t *testing.T, checks ...doctor.Check) []byte {
	t.Helper()
	res := &doctor.Result{Schema: doctor.Schema, Subject: "process 1", Status: doctor.Pass, Checks: checks}
	var b bytes.Buffer
	if err := render.Doctor(&b, res, render.FormatJSON, render.Options{}); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

type fakes struct {
	dir, scontrolLog, doctorArgs string
}

// newFakes puts a cudatrace that prints out and exits with rc, and a
// scontrol that records its arguments one per line, in a fresh PATH dir.
func newFakes(t *testing.T, out []byte, rc int, sleep string) *fakes {
	t.Helper()
	f := &fakes{dir: t.TempDir()}
	f.scontrolLog = filepath.Join(f.dir, "scontrol.log")
	f.doctorArgs = filepath.Join(f.dir, "doctor.args")
	if err := os.WriteFile(filepath.Join(f.dir, "doctor.json"), out, 0o644); err != nil {
		t.Fatal(err)
	}
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(f.dir, name), []byte("#!/bin/sh\n"+body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write("cudatrace", `printf '%s\n' "$@" > "`+f.doctorArgs+`"
`+sleep+`
cat "`+filepath.Join(f.dir, "doctor.json")+`"
exit `+strconv.Itoa(rc)+"\n")
	write("scontrol", `printf '%s\n' "$@" >> "`+f.scontrolLog+`"`+"\n")
	return f
}

// run runs a script with the fakes first on PATH; it returns stdout and the
// exit status.
func (f *fakes) run(t *testing.T, env []string, script string, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/bin/sh", append([]string{script}, args...)...)
	cmd.Env = append([]string{"PATH=" + f.dir + ":/usr/bin:/bin", "CUDATRACE_HEALTH=" + healthScript(t)}, env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("%s %v did not finish in 30s", script, args)
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	t.Logf("%s %v: stdout %q stderr %q", filepath.Base(script), args, stdout.String(), stderr.String())
	return stdout.String(), cmd.ProcessState.ExitCode()
}

func (f *fakes) scontrolCalls(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(f.scontrolLog)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}

func healthScript(t *testing.T) string {
	p, err := filepath.Abs("cudatrace-health.sh")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

var (
	hostile = doctor.Check{ID: "driver-modules", Category: doctor.CatDriver, Status: doctor.Fail, Subject: "nvidia",
		Summary: "the nvidia kernel module is not loaded\"; reboot; `id` $(id) | & < > \\ \n" +
			"second line \x1b[31m → " + strings.Repeat("x", 300)}
	warn = doctor.Check{ID: "uvm-hmm", Category: doctor.CatDriver, Status: doctor.Warn, Subject: "nvidia_uvm", Summary: "HMM is on"}
	pass = doctor.Check{ID: "nodes", Category: doctor.CatNodes, Status: doctor.Pass, Subject: "/dev/nvidia*", Summary: "all present"}
)

// safeReason: what the scripts promise of the text they hand on.
var safeReason = regexp.MustCompile(`^[A-Za-z0-9 ._,:/=+@%()-]{1,160}$`)

func TestSlurmDrainsABrokenNode(t *testing.T) {
	for _, tc := range []struct {
		script string
		rc     int
	}{{"slurm/prolog", 1}, {"slurm/healthcheck", 0}} {
		t.Run(tc.script, func(t *testing.T) {
			f := newFakes(t, doctorJSON(t, pass, warn, hostile), 3, "")
			_, rc := f.run(t, []string{"SLURMD_NODENAME=gpu-07"}, tc.script)
			if rc != tc.rc {
				t.Errorf("exit %d, want %d", rc, tc.rc)
			}
			calls := f.scontrolCalls(t)
			if len(calls) != 4 || calls[0] != "update" || calls[1] != "nodename=gpu-07" || calls[2] != "state=drain" {
				t.Fatalf("scontrol %q, want update nodename=gpu-07 state=drain reason=...", calls)
			}
			reason, ok := strings.CutPrefix(calls[3], "reason=")
			if !ok || !safeReason.MatchString(reason) {
				t.Errorf("reason %q is not one bounded line of safe characters", calls[3])
			}
			if want := "cudatrace: driver-modules: the nvidia kernel module is not loaded reboot id (id) second line 31m xxx"; !strings.HasPrefix(reason, want) {
				t.Errorf("reason %q, want it to start %q", reason, want)
			}
			if len(reason) != 160 {
				t.Errorf("reason is %d characters, want the 160 it is cut to", len(reason))
			}
		})
	}
}

func TestSlurmLeavesOtherNodesAlone(t *testing.T) {
	for _, tc := range []struct {
		name  string
		out   []byte
		rc    int
		sleep string
		env   []string
	}{
		{"healthy", doctorJSON(t, pass), 0, "", nil},
		{"warning only", doctorJSON(t, pass, warn), 5, "", nil},
		{"doctor failed", nil, 1, "", nil},
		{"usage error", nil, 2, "", nil},
		{"timed out", doctorJSON(t, hostile), 3, "sleep 20", []string{"CUDATRACE_TIMEOUT=1"}},
	} {
		for _, script := range []string{"slurm/prolog", "slurm/healthcheck"} {
			t.Run(tc.name+"/"+script, func(t *testing.T) {
				if tc.sleep != "" {
					if _, err := exec.LookPath("timeout"); err != nil {
						t.Skip("no timeout(1): the scripts then run doctor without one")
					}
				}
				f := newFakes(t, tc.out, tc.rc, tc.sleep)
				_, rc := f.run(t, append([]string{"SLURMD_NODENAME=gpu-07"}, tc.env...), script)
				if rc != 0 {
					t.Errorf("exit %d, want 0: the job must not be held for this", rc)
				}
				if calls := f.scontrolCalls(t); calls != nil {
					t.Errorf("scontrol %q, want no call", calls)
				}
			})
		}
	}
}

func TestSlurmNodeName(t *testing.T) {
	f := newFakes(t, doctorJSON(t, hostile), 3, "")
	f.run(t, []string{"SLURMD_NODENAME=gpu-07", "CUDATRACE_NODENAME=node-a"}, "slurm/healthcheck")
	if calls := f.scontrolCalls(t); len(calls) < 2 || calls[1] != "nodename=node-a" {
		t.Errorf("scontrol %q, want nodename=node-a (CUDATRACE_NODENAME wins)", calls)
	}
}

// NPD's contract: 0 OK, 1 NonOK, 2 Unknown; stdout is the message.
func TestNPDExitCodes(t *testing.T) {
	for _, tc := range []struct {
		mode    string
		out     []byte
		rc      int
		want    int
		message string
	}{
		{"fail", doctorJSON(t, pass, warn, hostile), 3, 1, "driver-modules: the nvidia kernel module is not loaded reboot id"},
		{"fail", doctorJSON(t, pass, warn), 5, 0, ""},
		{"fail", doctorJSON(t, pass), 0, 0, ""},
		{"fail", nil, 1, 2, "cudatrace doctor failed (exit 1)"},
		{"fail", nil, 2, 2, "cudatrace doctor failed (exit 2)"},
		{"warn", doctorJSON(t, pass, warn), 5, 1, "uvm-hmm: HMM is on"},
		{"warn", doctorJSON(t, warn, hostile), 3, 0, ""},
		{"warn", doctorJSON(t, pass), 0, 0, ""},
		{"warn", nil, 1, 2, "cudatrace doctor failed (exit 1)"},
	} {
		f := newFakes(t, tc.out, tc.rc, "")
		out, rc := f.run(t, nil, healthScript(t), "npd", tc.mode)
		if rc != tc.want {
			t.Errorf("npd %s, doctor exit %d: exit %d, want %d", tc.mode, tc.rc, rc, tc.want)
		}
		if !strings.HasPrefix(out, tc.message) || strings.Count(out, "\n") != 1 {
			t.Errorf("npd %s, doctor exit %d: message %q, want one line starting %q", tc.mode, tc.rc, out, tc.message)
		}
		if args, err := os.ReadFile(f.doctorArgs); err != nil || string(args) != "doctor\n--format\njson\n--pid\n1\n" {
			t.Errorf("doctor ran with %q (%v), want doctor --format json --pid 1", args, err)
		}
	}
	// Not there at all: Unknown, not NonOK.
	f := newFakes(t, nil, 0, "")
	if _, rc := f.run(t, []string{"CUDATRACE=" + filepath.Join(f.dir, "missing")}, healthScript(t), "npd", "fail"); rc != 2 {
		t.Errorf("missing cudatrace: exit %d, want 2 (Unknown)", rc)
	}
}

// With a PID namespace of its own the wrapper answers Unknown rather than
// check the wrong /dev.
func TestNPDRefusesAPIDNamespace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for unshare --pid")
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("no unshare")
	}
	f := newFakes(t, doctorJSON(t, hostile), 3, "")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, unshare, "--pid", "--fork", "--mount-proc", "/bin/sh", healthScript(t), "npd", "fail")
	cmd.Env = []string{"PATH=" + f.dir + ":/usr/bin:/bin"}
	out, _ := cmd.Output()
	if rc := cmd.ProcessState.ExitCode(); rc != 2 || !strings.Contains(string(out), "hostPID") {
		t.Errorf("in a PID namespace: exit %d, %q; want 2 and a word about hostPID", rc, out)
	}
	if _, err := os.Stat(f.doctorArgs); err == nil {
		t.Error("doctor ran anyway")
	}
}

// The real doctor on this machine: the wrapper's message is its first FAIL.
func TestNPDWithRealDoctor(t *testing.T) {
	if testing.Short() {
		t.Skip("builds cudatrace")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "cudatrace")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "../cmd/cudatrace")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	js, err := exec.CommandContext(ctx, bin, "doctor", "--format", "json", "--pid", "1").Output()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	var res doctor.Result
	if err := json.Unmarshal(js, &res); err != nil {
		t.Fatal(err)
	}
	f := newFakes(t, nil, 0, "")
	out, rc := f.run(t, []string{"CUDATRACE=" + bin}, healthScript(t), "npd", "fail")
	if res.Status != doctor.Fail {
		if rc != 0 {
			t.Errorf("doctor says %s, the wrapper exits %d", res.Status, rc)
		}
		return
	}
	var first doctor.Check
	for _, c := range res.Checks {
		if c.Status == doctor.Fail {
			first = c
			break
		}
	}
	want := sanitize(first.ID + ": " + first.Summary)
	if rc != 1 || strings.TrimSuffix(out, "\n") != want {
		t.Errorf("wrapper: exit %d, %q; want 1, %q", rc, out, want)
	}
}

// sanitize is the scripts' rule, for the oracle above.
func sanitize(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !strings.ContainsRune("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789 ._,:/=+@%()-", rune(c)) {
			b[i] = ' '
		}
	}
	out := strings.TrimSpace(regexp.MustCompile(` +`).ReplaceAllString(string(b), " "))
	if len(out) > 160 {
		out = out[:160]
	}
	return out
}
