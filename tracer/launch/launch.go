// Package launch starts a traced command without letting it run a single
// instruction before the tracer is ready. cudatrace re-executes itself as a
// small loader that blocks on a pipe; the backend attaches to the loader's
// PID (eBPF: puts it in the traced-TGID map; ptrace: seizes it), then calls
// Release, and the loader drops privileges, installs an optional seccomp
// filter and execs the target. The target keeps the loader's PID, stdin,
// stdout and stderr.
//
// The target's argv and environment travel as the loader's own argv and
// environment, so the kernel copies their bytes unchanged (any bytes, any
// size that an exec of the target itself accepts), and nothing of ours is
// added to the environment. The loader's own settings come through the
// pipe. The loader runs from the init of internal/loader, which imports
// only syscall: it starts before nearly every other package's init.
package launch

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/cudatrace/cudatrace/tracer"
	"github.com/cudatrace/cudatrace/tracer/launch/internal/loader"
)

const loaderArg0 = loader.Arg0

// HelperPrefix starts the /proc cmdline of a loader cudatrace runs as a
// helper, never released (the ptrace waker, the signal sentinel): their
// argv[0] after the marker is a name starting "cudatrace-", where a
// target's is a path.
const HelperPrefix = loaderArg0 + "\x00cudatrace-"

// Options describe the command to launch.
type Options struct {
	Argv []string // Argv[0] must already be resolved to a path
	// Env is the target's environment; nil passes the caller's environment
	// exactly as the kernel gave it (/proc/self/environ): byte for byte,
	// duplicates and entries without '=' included.
	Env []string
	// Cred runs the target as this user, with HOME, USER and LOGNAME set
	// to the user's; nil keeps the caller's credentials and environment.
	Cred *tracer.Cred
	// Seccomp is a classic-BPF filter installed in the target just before
	// exec (the ptrace backend's SECCOMP_RET_TRACE filter).
	Seccomp []unix.SockFilter
	// NoNewPrivs sets PR_SET_NO_NEW_PRIVS before installing Seccomp; needed
	// only when the loader lacks CAP_SYS_ADMIN.
	NoNewPrivs bool
	// DieWithParent kills the loader when the thread that started it
	// exits (PR_SET_PDEATHSIG): for helpers that are never released.
	DieWithParent bool
}

// Child is a started loader, waiting for Release.
type Child struct {
	PID     int
	proc    *os.Process
	release *os.File
}

// Start starts the loader. The command does not run until Release.
func Start(opts Options) (*Child, error) {
	if len(opts.Argv) == 0 {
		return nil, errors.New("no command to run")
	}
	cfg := loader.Config{NoNewPrivs: opts.NoNewPrivs}
	if c := opts.Cred; c != nil {
		cfg.Cred, cfg.UID, cfg.GID, cfg.Groups, cfg.User = true, c.UID, c.GID, c.Groups, c.User
	}
	for _, f := range opts.Seccomp {
		cfg.Seccomp = append(cfg.Seccomp, syscall.SockFilter{Code: f.Code, Jt: f.Jt, Jf: f.Jf, K: f.K})
	}
	env := opts.Env
	if env == nil {
		env = startEnviron()
	}
	if opts.Cred != nil {
		env = userEnv(env, opts.Cred)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	// /proc/self/exe rather than a path: it still runs if cudatrace's file
	// was replaced meanwhile, and its name is short on the new stack.
	// os.StartProcess, unlike exec.Cmd, passes env as is (no dedup).
	attr := &os.ProcAttr{Env: env, Files: []*os.File{os.Stdin, os.Stdout, os.Stderr, r}}
	if opts.DieWithParent {
		// Set in the child before it execs: set by the loader itself, a
		// SIGSTOP sent right after Start (the signal sentinel's) stopped
		// it before the prctl, and a killed cudatrace left it behind,
		// stopped, for good.
		attr.Sys = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	}
	proc, err := os.StartProcess("/proc/self/exe", append([]string{loaderArg0}, opts.Argv...), attr)
	_ = r.Close() // best-effort cleanup: nothing to do if it fails
	if err != nil {
		_ = w.Close() // best-effort cleanup: nothing to do if it fails
		return nil, fmt.Errorf("start loader: %w", err)
	}
	c := &Child{PID: proc.Pid, proc: proc, release: w}
	if _, err := w.Write(cfg.Encode()); err != nil {
		c.Abort()
		return nil, fmt.Errorf("start loader: send configuration: %w", err)
	}
	return c, nil
}

// userEnv sets HOME, USER and LOGNAME to the target user's, as su and
// sudo -u do; the rest of the environment is left alone.
func userEnv(env []string, c *tracer.Cred) []string {
	set := map[string]string{"USER": c.User, "LOGNAME": c.User}
	if c.Home != "" {
		set["HOME"] = c.Home
	}
	out := make([]string, 0, len(env)+len(set))
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if _, ok := set[name]; !ok {
			out = append(out, kv)
		}
	}
	for _, name := range []string{"HOME", "USER", "LOGNAME"} {
		if v, ok := set[name]; ok && v != "" {
			out = append(out, name+"="+v)
		}
	}
	return out
}

// startEnviron is this process's environment as the kernel gave it; Go's
// os.Environ drops duplicates and empty entries. It falls back to
// os.Environ where /proc is unreadable.
func startEnviron() []string {
	b, err := os.ReadFile("/proc/self/environ")
	if err != nil {
		return os.Environ()
	}
	return loader.SplitNUL(b)
}

// Release lets the loader exec the target.
func (c *Child) Release() error {
	defer func() { _ = c.release.Close() }() // best-effort cleanup: nothing to do if it fails
	_, err := c.release.Write([]byte{1})
	return err
}

// Abort kills the loader before it execs (the tracer failed to start).
func (c *Child) Abort() {
	_ = c.release.Close() // EOF tells the loader to give up
	_ = c.proc.Kill()     // it may have exited already; Wait reaps it either way
	_, _ = c.proc.Wait()  // its status is of no interest: we are aborting
}

// Wait waits for the target and returns how it ended. Backends that reap
// the child themselves (ptrace) do not call it.
func (c *Child) Wait() (tracer.ExitStatus, error) {
	ps, err := c.proc.Wait()
	if err != nil {
		return tracer.ExitStatus{}, err
	}
	st, ok := ps.Sys().(syscall.WaitStatus)
	if !ok {
		return tracer.ExitStatus{}, errors.New("unknown wait status")
	}
	return StatusOf(st), nil
}

// StatusOf converts a wait status.
func StatusOf(st syscall.WaitStatus) tracer.ExitStatus {
	if st.Signaled() {
		return tracer.ExitStatus{Signal: int(st.Signal())}
	}
	return tracer.ExitStatus{Code: st.ExitStatus()}
}

func init() {
	// Reached only where the loader package's init could not read
	// /proc/self/cmdline: the loader runs here, later (issue 31).
	if IsLoader() {
		loader.Main(os.Args[1:])
	}
}

// IsLoader reports whether this process was started as a loader.
func IsLoader() bool { return len(os.Args) > 1 && os.Args[0] == loaderArg0 }

// RunLoaderIfRequested turns this process into the loader when it was
// started by Start, and never returns in that case. The loader package's
// init does so already (this package's where /proc is unreadable); the call
// in main (and in TestMain of tests that launch targets) says where a
// loader stops.
func RunLoaderIfRequested() {
	if IsLoader() {
		loader.Main(os.Args[1:])
	}
}
