// Command fakecuda performs the device-node part of libcuda's cuInit, as
// recorded on a real H200 host (testdata/strace/h200), with the same
// syscalls, and prints "cuInit N" like
// python3 -c 'import ctypes; print("cuInit", ctypes.CDLL("libcuda.so.1").cuInit(0))'.
// End-to-end tests of cudatrace run it inside broken environments built by
// internal/scenario. See README.md.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
	"time"
)

// Keep the main goroutine on the main thread (TID == PID), so that --thread
// runs the sequence on a thread with a different TID.
func init() { runtime.LockOSThread() }

type options struct {
	procDevices string
	dev         string
	modprobe    string
	libcuda     string
	thread      bool
	forkDepth   int
	loop        int
	interval    time.Duration
	sleepBefore time.Duration
	exitNonzero bool
	noIoctls    bool
	cuInitLib   bool
	memfd       bool
	verbose     bool
	hostDev     bool
}

func parseFlags(args []string) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("fakecuda", flag.ContinueOnError)
	fs.SetOutput(os.Stderr)
	fs.StringVar(&o.procDevices, "proc-devices", defaultProcDevs, "file read as /proc/devices")
	fs.StringVar(&o.dev, "dev", defaultDevPrefix, "directory used as /dev")
	fs.StringVar(&o.modprobe, "modprobe", defaultModprobe, "nvidia-modprobe to run when a node cannot be repaired")
	fs.StringVar(&o.libcuda, "libcuda", "", "open this file first, as the dynamic loader opens libcuda.so.1")
	fs.BoolVar(&o.thread, "thread", false, "run the sequence on a second OS thread")
	fs.IntVar(&o.forkDepth, "fork-depth", 0, "re-exec this many levels deep; the deepest runs the sequence")
	fs.IntVar(&o.loop, "loop", 1, "run the sequence this many times (0: forever)")
	fs.DurationVar(&o.interval, "interval", 100*time.Millisecond, "pause between --loop iterations")
	fs.DurationVar(&o.sleepBefore, "sleep-before", 0, "pause before the first sequence")
	fs.BoolVar(&o.exitNonzero, "exit-nonzero", false, "exit 1 when cuInit is not 0")
	fs.BoolVar(&o.cuInitLib, "cuinit-lib", false, "return cuInit's result through the cuInit of a libcuda.so.1 written to $TMPDIR, so a uretprobe sees it (amd64)")
	fs.BoolVar(&o.noIoctls, "no-ioctls", false, "issue no ioctl, as if each worked: stand-in nodes answer every one with ENOTTY, which no NVIDIA driver does (make demo)")
	fs.BoolVar(&o.memfd, "memfd", false, "call memfd_create after nvidiactl (a seccomp denial gives cuInit 304)")
	fs.BoolVar(&o.verbose, "v", false, "log each call and its result to stderr")
	fs.BoolVar(&o.hostDev, "host-dev", false, "as root, really create missing nodes in this host's /dev (outside a scenario)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if o.forkDepth < 0 || o.loop < 0 || o.interval < 0 || o.sleepBefore < 0 {
		return nil, errors.New("--fork-depth, --loop, --interval and --sleep-before must not be negative")
	}
	return o, nil
}

func main() {
	o, err := parseFlags(os.Args[1:])
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "fakecuda:", err)
		os.Exit(2)
	}
	os.Exit(run(o))
}

// checkDev refuses, as root, to repair nodes in a /dev that is not a
// scenario's private one: fakecuda creates /dev/nvidiactl and friends as
// libcuda would, and run by hand that is the host's /dev.
func checkDev(o *options, euid int, mountinfo string) error {
	if euid != 0 || o.hostDev || filepath.Clean(o.dev) != "/dev" {
		return nil
	}
	b, err := readRaw(mountinfo)
	if err != nil {
		return &unreadableError{err}
	}
	fstype := ""
	for _, line := range strings.Split(string(b), "\n") {
		// id parent maj:min root mountpoint opts [optional...] - fstype source superopts
		f := strings.Fields(line)
		sep := slices.Index(f, "-")
		if len(f) > 4 && sep > 0 && sep+2 < len(f) && f[4] == "/dev" {
			fstype = f[sep+1] // the last mount on /dev is the one seen
		}
	}
	// The host's /dev is the kernel's devtmpfs; a scenario's, and a
	// container's, is a tmpfs of its own.
	if fstype == "devtmpfs" {
		return errors.New("as root this creates missing NVIDIA nodes in /dev, and this /dev is the host's, not a scenario's: run it through make demo or scripts/scenario, or pass --dev DIR (or --host-dev to mean it)")
	}
	return nil
}

// unreadableError: mountinfo could not be read, so whether /dev is the
// host's is unknown.
type unreadableError struct{ err error }

func (e *unreadableError) Error() string {
	return fmt.Sprintf("cannot tell whether /dev is the host's (%v): pass --dev DIR, or --host-dev", e.err)
}

// readRaw reads a file with plain syscalls and one fd: os.ReadFile would
// first need the runtime's epoll fd, which a low RLIMIT_NOFILE refuses.
func readRaw(p string) ([]byte, error) {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	var out []byte
	buf := make([]byte, 16<<10)
	for len(out) < 1<<20 {
		n, err := unix.Read(fd, buf)
		if err != nil {
			return nil, err
		}
		if n <= 0 {
			break
		}
		out = append(out, buf[:n]...)
	}
	return out, nil
}

// run returns the exit status.
func run(o *options) int {
	if o.forkDepth > 0 {
		return reexec(o.forkDepth - 1)
	}
	time.Sleep(o.sleepBefore)
	status := 0
	var lib *loadedLib
	if o.cuInitLib {
		// Loaded first, as a CUDA program's loader maps libcuda before
		// cuInit runs.
		var err error
		if lib, err = loadFakeLibcuda(&sequence{}, os.TempDir()); err != nil {
			fmt.Fprintln(os.Stderr, "fakecuda:", err)
			return 1
		}
		defer lib.unload()
	}
	for i := 0; o.loop == 0 || i < o.loop; i++ {
		if i > 0 {
			time.Sleep(o.interval)
		}
		code, err := cuInit(o)
		if err != nil {
			fmt.Fprintln(os.Stderr, "fakecuda:", err)
			return 1
		}
		if lib != nil {
			code = lib.call(code)
		}
		fmt.Printf("cuInit %d\n", code)
		status = 0
		if o.exitNonzero && code != cudaSuccess {
			status = 1
		}
	}
	return status
}

func cuInit(o *options) (int, error) {
	q := &sequence{
		// Checked when it first changes /dev, not up front: a target under
		// a low fd limit cannot read mountinfo, and never gets that far.
		sys: sys{beforeWrite: func() error {
			err := checkDev(o, os.Geteuid(), "/proc/self/mountinfo")
			var unreadable *unreadableError
			if errors.As(err, &unreadable) {
				// No fd left, or a seccomp filter refuses the open: the
				// repair fails, as libcuda's would, and nothing is written.
				return unreadable.err
			}
			if err != nil {
				fmt.Fprintln(os.Stderr, "fakecuda:", err)
				os.Exit(2)
			}
			return nil
		}},
		dev:         o.dev,
		procDevices: o.procDevices,
		modprobe:    o.modprobe,
		libcuda:     o.libcuda,
		memfd:       o.memfd,
	}
	q.noIoctls = o.noIoctls
	if o.verbose {
		q.log = os.Stderr
	}
	if !o.thread {
		return q.run()
	}
	type outcome struct {
		code int
		err  error
	}
	done := make(chan outcome)
	go func() {
		// Locked so the whole sequence stays on one thread, which cannot be
		// the main thread: main holds that one.
		runtime.LockOSThread()
		code, err := q.run()
		done <- outcome{code, err}
	}()
	r := <-done
	return r.code, r.err
}

// reexec runs this program again with the same arguments and
// --fork-depth=depth (the last value of a flag wins), and returns the child's
// exit status.
func reexec(depth int) int {
	args := append(os.Args[1:len(os.Args):len(os.Args)], "--fork-depth="+strconv.Itoa(depth))
	cmd := exec.Command("/proc/self/exe", args...)
	cmd.Args[0] = os.Args[0]
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &exit):
		if exit.ExitCode() >= 0 {
			return exit.ExitCode()
		}
		return 128 + 9 // killed by a signal; ExitCode hides which
	default:
		fmt.Fprintln(os.Stderr, "fakecuda:", err)
		return 1
	}
}
