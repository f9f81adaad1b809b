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
// pipe.
package launch

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/cudatrace/cudatrace/tracer"
)

// loaderArg0 is the loader's argv[0], which marks a process as the loader;
// the target's argv follows it (what ps shows while the loader waits).
const loaderArg0 = "cudatrace-loader"

// HelperPrefix starts the /proc cmdline of a loader cudatrace runs as a
// helper, never released (the ptrace waker, the signal sentinel): their
// argv[0] after the marker is a name starting "cudatrace-", where a
// target's is a path.
const HelperPrefix = loaderArg0 + "\x00cudatrace-"

// configMagic starts the configuration on the pipe, so that a process
// started as loaderArg0 by anything else fails cleanly.
const configMagic = "cudatrace-loader-config\x00"

// maxConfig bounds the configuration the loader reads (a seccomp filter
// has at most 4096 instructions of 8 bytes).
const maxConfig = 1 << 20

// releaseFD is the pipe the loader reads its configuration from and then
// waits on (the first ExtraFiles entry).
const releaseFD = 3

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

// loaderConfig is what the loader reads from the pipe. Nothing in it comes
// from the target's argv or environment.
type loaderConfig struct {
	Cred       *tracer.Cred
	Seccomp    []unix.SockFilter
	NoNewPrivs bool
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
	cfg, err := json.Marshal(loaderConfig{opts.Cred, opts.Seccomp, opts.NoNewPrivs})
	if err != nil {
		return nil, err
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
	msg := make([]byte, 0, len(configMagic)+4+len(cfg))
	msg = append(msg, configMagic...)
	msg = binary.LittleEndian.AppendUint32(msg, uint32(len(cfg)))
	msg = append(msg, cfg...)
	if _, err := w.Write(msg); err != nil {
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
	return splitNUL(b)
}

// splitNUL splits NUL-terminated strings.
func splitNUL(b []byte) []string {
	out := []string{}
	for len(b) > 0 {
		i := bytes.IndexByte(b, 0)
		if i < 0 {
			return append(out, string(b)) // unterminated last entry
		}
		out = append(out, string(b[:i]))
		b = b[i+1:]
	}
	return out
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
	// The loader must exec from the thread-group leader: a ptrace backend
	// seizes only that thread, and seccomp filters are per thread. init runs
	// on the main thread, so pin it there before the runtime moves us.
	// It runs from here, not from main: the packages initialised after this
	// one (those sorted after it that it does not import: the metrics
	// client, protobuf, the renderers, ~1.7 ms here) are then never
	// initialised in a loader, which stands between the spawn and the
	// target's first instruction (issue 31).
	if IsLoader() {
		runtime.LockOSThread()
		os.Exit(runLoader(os.Args[1:]))
	}
}

// IsLoader reports whether this process was started as a loader.
func IsLoader() bool { return len(os.Args) > 1 && os.Args[0] == loaderArg0 }

// RunLoaderIfRequested turns this process into the loader when it was
// started by Start, and never returns in that case. This package's init
// does so already; the call in main (and in TestMain of tests that launch
// targets) says where a loader stops.
func RunLoaderIfRequested() {
	if IsLoader() {
		os.Exit(runLoader(os.Args[1:]))
	}
}

// readConfig reads the configuration Start wrote on the pipe.
func readConfig(r io.Reader) (*loaderConfig, error) {
	head := make([]byte, len(configMagic)+4)
	if _, err := io.ReadFull(r, head); err != nil || string(head[:len(configMagic)]) != configMagic {
		return nil, errors.New("bad configuration")
	}
	n := binary.LittleEndian.Uint32(head[len(configMagic):])
	if n > maxConfig {
		return nil, errors.New("bad configuration")
	}
	raw := make([]byte, n)
	if _, err := io.ReadFull(r, raw); err != nil {
		return nil, errors.New("bad configuration")
	}
	var cfg loaderConfig
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return nil, errors.New("bad configuration")
	}
	return &cfg, nil
}

func runLoader(argv []string) int {
	fail := func(code int, format string, args ...any) int {
		fmt.Fprintf(os.Stderr, "cudatrace: "+format+"\n", args...)
		return code
	}
	release := os.NewFile(releaseFD, "release")
	if release == nil {
		return fail(1, "loader: bad configuration")
	}
	cfg, err := readConfig(release)
	if err != nil {
		return fail(1, "loader: %v", err)
	}
	// Our own environment is the target's, as Start passed it.
	env := startEnviron()
	var b [1]byte
	if n, _ := release.Read(b[:]); n != 1 {
		return 1 // the tracer gave up; it reports why
	}
	_ = release.Close() // best-effort cleanup: nothing to do if it fails

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
	name := []byte(filepath.Base(argv[0]))
	if len(name) > 15 {
		name = name[:15]
	}
	_ = unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(&append(name, 0)[0])), 0, 0, 0) // cosmetic: the name in ps
	err = syscall.Exec(argv[0], argv, env)
	code := 126
	if errors.Is(err, syscall.ENOENT) {
		code = 127
	}
	return fail(code, "cannot run %s: %v", argv[0], err)
}
