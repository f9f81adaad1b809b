// Package launch starts a traced command without letting it run a single
// instruction before the tracer is ready. cudatrace re-executes itself as a
// small loader that blocks on a pipe; the backend attaches to the loader's
// PID (eBPF: puts it in the traced-TGID map; ptrace: seizes it), then calls
// Release, and the loader drops privileges, installs an optional seccomp
// filter and execs the target. The target keeps the loader's PID, stdin,
// stdout and stderr.
package launch

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/cudatrace/cudatrace/tracer"
)

// envConfig carries the loader's instructions from parent to loader.
const envConfig = "CUDATRACE_LOADER"

// releaseFD is the pipe the loader waits on (the first ExtraFiles entry).
const releaseFD = 3

// Options describe the command to launch.
type Options struct {
	Argv []string     // Argv[0] must already be resolved to a path
	Cred *tracer.Cred // run as this user; nil keeps the caller's credentials
	// Seccomp is a classic-BPF filter installed in the target just before
	// exec (the ptrace backend's SECCOMP_RET_TRACE filter).
	Seccomp []unix.SockFilter
	// NoNewPrivs sets PR_SET_NO_NEW_PRIVS before installing Seccomp; needed
	// only when the loader lacks CAP_SYS_ADMIN.
	NoNewPrivs bool
}

type loaderConfig struct {
	Argv       []string
	Cred       *tracer.Cred
	Seccomp    []unix.SockFilter
	NoNewPrivs bool
}

// Child is a started loader, waiting for Release.
type Child struct {
	PID     int
	cmd     *exec.Cmd
	release *os.File
}

// Start starts the loader. The command does not run until Release.
func Start(opts Options) (*Child, error) {
	if len(opts.Argv) == 0 {
		return nil, errors.New("no command to run")
	}
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find own executable: %w", err)
	}
	cfg, err := json.Marshal(loaderConfig{opts.Argv, opts.Cred, opts.Seccomp, opts.NoNewPrivs})
	if err != nil {
		return nil, err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self)
	cmd.Args = []string{opts.Argv[0]} // what ps shows while the loader waits
	cmd.Env = append(os.Environ(), envConfig+"="+base64.StdEncoding.EncodeToString(cfg))
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.ExtraFiles = []*os.File{r}
	if err := cmd.Start(); err != nil {
		r.Close()
		w.Close()
		return nil, fmt.Errorf("start loader: %w", err)
	}
	r.Close()
	return &Child{PID: cmd.Process.Pid, cmd: cmd, release: w}, nil
}

// Release lets the loader exec the target.
func (c *Child) Release() error {
	defer c.release.Close()
	_, err := c.release.Write([]byte{1})
	return err
}

// Abort kills the loader before it execs (the tracer failed to start).
func (c *Child) Abort() {
	c.release.Close() // EOF tells the loader to give up
	c.cmd.Process.Kill()
	c.cmd.Wait()
}

// Wait waits for the target and returns how it ended. Backends that reap
// the child themselves (ptrace) do not call it.
func (c *Child) Wait() (tracer.ExitStatus, error) {
	err := c.cmd.Wait()
	st, ok := c.cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ok {
		return tracer.ExitStatus{}, err
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
	// The loader must exec from the thread-group leader: a ptrace backend
	// seizes only that thread, and seccomp filters are per thread. init runs
	// on the main thread, so pin it there before the runtime moves us.
	if os.Getenv(envConfig) != "" {
		runtime.LockOSThread()
	}
}

// IsLoader reports whether this process was started as a loader.
func IsLoader() bool { return os.Getenv(envConfig) != "" }

// RunLoaderIfRequested turns this process into the loader when it was
// started by Start, and never returns in that case. Call it first in main
// (and in TestMain of tests that launch targets).
func RunLoaderIfRequested() {
	enc := os.Getenv(envConfig)
	if enc == "" {
		return
	}
	os.Exit(runLoader(enc))
}

func runLoader(enc string) int {
	fail := func(code int, format string, args ...any) int {
		fmt.Fprintf(os.Stderr, "cudatrace: "+format+"\n", args...)
		return code
	}
	raw, err := base64.StdEncoding.DecodeString(enc)
	if err != nil {
		return fail(1, "loader: bad configuration")
	}
	var cfg loaderConfig
	if err := json.Unmarshal(raw, &cfg); err != nil || len(cfg.Argv) == 0 {
		return fail(1, "loader: bad configuration")
	}
	release := os.NewFile(releaseFD, "release")
	var b [1]byte
	if n, _ := release.Read(b[:]); n != 1 {
		return 1 // the tracer gave up; it reports why
	}
	release.Close()

	env := make([]string, 0, len(os.Environ()))
	for _, kv := range os.Environ() {
		if len(kv) > len(envConfig) && kv[:len(envConfig)+1] == envConfig+"=" {
			continue
		}
		env = append(env, kv)
	}
	// The filter goes in while we are still root (no no_new_privs needed),
	// before the credentials drop.
	if len(cfg.Seccomp) > 0 {
		if cfg.NoNewPrivs {
			if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
				return fail(1, "set no_new_privs: %v", err)
			}
		}
		prog := unix.SockFprog{Len: uint16(len(cfg.Seccomp)), Filter: &cfg.Seccomp[0]}
		if _, _, errno := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&prog))); errno != 0 {
			return fail(1, "install seccomp filter: %v", errno)
		}
	}
	if c := cfg.Cred; c != nil {
		groups := make([]int, len(c.Groups))
		for i, g := range c.Groups {
			groups[i] = int(g)
		}
		if err := syscall.Setgroups(groups); err != nil {
			return fail(1, "setgroups for %s: %v", c.User, err)
		}
		if err := syscall.Setgid(int(c.GID)); err != nil {
			return fail(1, "setgid %d: %v", c.GID, err)
		}
		if err := syscall.Setuid(int(c.UID)); err != nil {
			return fail(1, "setuid %d: %v", c.UID, err)
		}
	}
	// The exec is the first traced call: let it carry the target's name,
	// not "cudatrace", in the report.
	name := []byte(filepath.Base(cfg.Argv[0]))
	if len(name) > 15 {
		name = name[:15]
	}
	unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(&append(name, 0)[0])), 0, 0, 0)
	err = syscall.Exec(cfg.Argv[0], cfg.Argv, env)
	code := 126
	if errors.Is(err, syscall.ENOENT) {
		code = 127
	}
	return fail(code, "cannot run %s: %v", cfg.Argv[0], err)
}
