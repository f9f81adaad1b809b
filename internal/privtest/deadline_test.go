package privtest

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// envScenario makes this test binary, re-executed, run one scenario of a
// test that outlives its deadline.
const envScenario = "PRIVTEST_DEADLINE_SCENARIO"

// TestDeadlineScenario is the re-executed side; it does nothing in a
// normal run.
func TestDeadlineScenario(t *testing.T) {
	scenario := os.Getenv(envScenario)
	if scenario == "" {
		t.Skip("run by TestDeadline")
	}
	Timeout, grace = 300*time.Millisecond, 500*time.Millisecond
	ctx := Deadline(t)
	if Deadline(t) != ctx {
		t.Error("a second Deadline in the same test armed another")
	}
	switch scenario {
	case "child":
		// A target that never ends: the watchdog kills it and Wait returns.
		cmd := exec.Command("sleep", "60")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		err := cmd.Wait()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Errorf("sleep ended with %v, want SIGKILL", err)
		}
		if ctx.Err() != context.DeadlineExceeded {
			t.Errorf("context: %v, want deadline exceeded", ctx.Err())
		}
	case "stuck":
		select {} // nothing to kill: the binary is stopped
	case "quick":
	}
}

func runScenario(t *testing.T, scenario string) (string, time.Duration, error) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, self, "-test.run", "^TestDeadlineScenario$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), envScenario+"="+scenario)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	return string(out), time.Since(start), err
}

func TestDeadline(t *testing.T) {
	t.Run("kills a hung child and fails the test", func(t *testing.T) {
		out, took, err := runScenario(t, "child")
		if err == nil || !strings.Contains(out, "--- FAIL: TestDeadlineScenario") ||
			!strings.Contains(out, "still running after 300ms") || took > 20*time.Second {
			t.Errorf("err %v after %v:\n%s", err, took, out)
		}
		if strings.Contains(out, "sleep ended with") || strings.Contains(out, "context:") {
			t.Errorf("the child was not killed by the deadline:\n%s", out)
		}
	})
	t.Run("stops a binary whose test cannot be unblocked", func(t *testing.T) {
		out, took, err := runScenario(t, "stuck")
		if err == nil || !strings.Contains(out, "panic: TestDeadlineScenario: still running 500ms after its 300ms deadline") ||
			!strings.Contains(out, "goroutine ") || took > 20*time.Second {
			t.Errorf("err %v after %v:\n%s", err, took, out)
		}
	})
	t.Run("a test within its deadline passes", func(t *testing.T) {
		out, _, err := runScenario(t, "quick")
		if err != nil || !strings.Contains(out, "--- PASS: TestDeadlineScenario") {
			t.Errorf("err %v:\n%s", err, out)
		}
	})
}
