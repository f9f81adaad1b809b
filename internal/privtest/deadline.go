package privtest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// EnvTimeout overrides Timeout (a Go duration, e.g. "10m") on a slow host.
const EnvTimeout = "CUDATRACE_TEST_TIMEOUT"

// Timeout is how long one privileged test may run. It is a hang guard, not a
// performance assertion: the slowest privileged test takes seconds on an idle
// host, and a loaded shared one must not trip it.
var Timeout = timeoutFromEnv()

// grace is how long a test that blew its deadline gets to return once its
// processes are killed, before the whole binary is stopped with every
// goroutine's stack (the test goroutine is stuck on something else).
var grace = 30 * time.Second

func timeoutFromEnv() time.Duration {
	if d, err := time.ParseDuration(os.Getenv(EnvTimeout)); err == nil && d > 0 {
		return d
	}
	return 3 * time.Minute
}

// watchdogs are the armed deadlines, so that one expiring knows whether the
// binary's processes are all its own test's: no guarded test runs beside
// it other than its parents and subtests.
var watchdogs struct {
	sync.Mutex
	armed map[testing.TB]context.Context
}

// alone reports whether every armed test is t, a parent or a subtest of it.
func alone(t testing.TB) bool {
	watchdogs.Lock()
	defer watchdogs.Unlock()
	me := t.Name()
	for other := range watchdogs.armed {
		n := other.Name()
		if n != me && !strings.HasPrefix(me, n+"/") && !strings.HasPrefix(n, me+"/") {
			return false
		}
	}
	return true
}

// Deadline bounds t to Timeout and returns a context that ends at the
// deadline (or when t ends), for the code under test. Past the deadline the
// test fails, and, when no other guarded test runs beside it (parents and
// subtests aside), every process this test binary started is killed, which is what unblocks a test waiting
// on a stopped or hung target. A test still running a grace period later
// stops the binary with all goroutine stacks: go test's own -timeout would
// otherwise stall the suite for its full length. Calling it again in the
// same test returns the same context.
//
// The clock runs while a test waits in t.Parallel, and a parent's covers
// its subtests: arm it (or RequireRoot) after t.Parallel, and in the
// subtests that do the work rather than in a parent that only runs them.
func Deadline(t testing.TB) context.Context {
	t.Helper()
	watchdogs.Lock()
	defer watchdogs.Unlock()
	if ctx, ok := watchdogs.armed[t]; ok {
		return ctx
	}
	if watchdogs.armed == nil {
		watchdogs.armed = map[testing.TB]context.Context{}
	}
	limit, graceLeft := Timeout, grace
	ctx, cancel := context.WithTimeout(t.Context(), limit)
	watchdogs.armed[t] = ctx

	var mu sync.Mutex // finished and the expiry's Errorf exclude each other
	finished := false
	done := make(chan struct{})
	// Registered first, so it runs after the test's own cleanups: a cleanup
	// that hangs is caught too.
	t.Cleanup(func() {
		mu.Lock()
		finished = true
		mu.Unlock()
		close(done)
		cancel()
		watchdogs.Lock()
		delete(watchdogs.armed, t)
		watchdogs.Unlock()
	})
	go func() {
		timer := time.NewTimer(limit)
		defer timer.Stop()
		select {
		case <-done:
			return
		case <-timer.C:
		}
		// ctx's deadline is this timer's or earlier (it was set first), but
		// the two fire in either order: the test must find ctx expired once
		// its target is killed, on a loaded machine too.
		<-ctx.Done()
		// Killing a test's target lets it return at once: the failure is
		// recorded before its cleanup can mark it finished (the cleanup
		// waits for mu), or a test unblocked by the kill would pass.
		mu.Lock()
		if !finished {
			var killed []int
			if alone(t) {
				killed = killDescendants()
			}
			t.Errorf("%s: still running after %v (the per-test deadline, %s); killed this binary's processes %v",
				t.Name(), limit, EnvTimeout, killed)
		}
		mu.Unlock()
		select {
		case <-done:
		case <-time.After(graceLeft):
			debug.SetTraceback("all")
			panic(fmt.Sprintf("%s: still running %v after its %v deadline", t.Name(), graceLeft, limit))
		}
	}()
	return ctx
}

// killDescendants SIGKILLs every process below this one, deepest first,
// and returns their PIDs. It reads /proc/PID/task/TID/children, so a
// process reparented away (to init) is out of reach; the tests' targets
// are their own children.
func killDescendants() []int {
	var order []int
	var walk func(pid int)
	walk = func(pid int) {
		files, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
		for _, f := range files {
			b, _ := os.ReadFile(f)
			for _, s := range strings.Fields(string(b)) {
				if child, err := strconv.Atoi(s); err == nil {
					walk(child)
					order = append(order, child)
				}
			}
		}
	}
	walk(os.Getpid())
	for _, pid := range order {
		_ = syscall.Kill(pid, syscall.SIGKILL) // it may have exited already
	}
	return order
}
