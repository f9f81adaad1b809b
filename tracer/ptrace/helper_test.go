package ptrace

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/cudatrace/cudatrace/internal/fakeinband"
	"github.com/cudatrace/cudatrace/internal/fakelimits"
	"github.com/cudatrace/cudatrace/tracer/launch"
)

// The test binary doubles as the traced program: `TEST ptest-helper MODE
// ARGS...` performs exactly the syscalls a test expects to see.
const helperArg = "ptest-helper"

func TestMain(m *testing.M) {
	launch.RunLoaderIfRequested()
	if len(os.Args) > 2 && os.Args[1] == helperArg {
		os.Exit(runHelper(os.Args[2], os.Args[3:]))
	}
	os.Exit(m.Run())
}

func helperArgv(mode string, args ...string) []string {
	self, err := os.Executable()
	if err != nil {
		panic(err)
	}
	return append([]string{self, helperArg, mode}, args...)
}

// testIoctl is _IOWR('F', 0x2a, 32 bytes): an NVIDIA-style request with a
// 32-byte params block. /dev/null answers ENOTTY.
const testIoctl = 0xC020462A

func runHelper(mode string, args []string) int {
	switch mode {
	case "calls":
		return helperCalls(args[0], args[1])
	case "thread":
		return helperThread(args[0], args[1])
	case "spin":
		return helperSpin(args[0], args[1])
	case "thread-exec":
		return helperThreadExec(args)
	case "bench":
		return helperBench(args)
	case "short-children":
		return helperShortChildren(args[0])
	case "inband":
		if err := fakeinband.Repeat(args[0]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return 0
	case "round":
		return helperRound(args)
	case "spin-exec":
		return helperSpinExec(args)
	case "fork-exit":
		return helperForkExit(args)
	case "limits":
		if err := fakelimits.Run(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return 0
	}
	fmt.Fprintln(os.Stderr, "unknown helper mode", mode)
	return 2
}

// helperCalls issues one of each traced call on node (a char device) and
// on paths derived from prefix (under /dev, named /dev/nvidia...).
func helperCalls(node, prefix string) int {
	fd, err := unix.Open(node, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	var params [32]byte
	for i := range params {
		params[i] = byte(i + 1)
	}
	unix.Syscall(unix.SYS_IOCTL, uintptr(fd), testIoctl, uintptr(unsafe.Pointer(&params[0])))
	unix.Syscall(unix.SYS_IOCTL, ^uintptr(0), testIoctl, 0) // fd -1: EBADF
	unix.Close(fd)
	unix.Open(prefix+"-missing", unix.O_RDONLY, 0) // ENOENT
	var st unix.Stat_t
	unix.Stat(node, &st)
	var stx unix.Statx_t
	unix.Statx(unix.AT_FDCWD, node, 0, unix.STATX_BASIC_STATS, &stx)
	unix.Access(node, unix.R_OK)
	unix.Mknod(prefix+"-mk", unix.S_IFCHR|0o600, int(unix.Mkdev(1, 3)))
	unix.Symlink("nvidiactl", prefix+"-link")
	unix.Unlink(prefix + "-link")
	unix.Unlink(prefix + "-mk")
	unix.Mkdir(prefix+"-dir", 0o700)
	unix.Rmdir(prefix + "-dir")
	mfd, _ := unix.MemfdCreate("cudatrace-ptest", unix.MFD_CLOEXEC)
	unix.Close(mfd)
	// Not traced: other paths, other devices' ioctls.
	if f, err := unix.Open("/proc/self/status", unix.O_RDONLY, 0); err == nil {
		unix.Close(f)
	}
	unix.Stat("/proc/self", &st)
	legacyCalls(prefix)
	return 0
}

// helperThread opens path from a second thread and writes "pid tid" of
// that thread to out.
func helperThread(path, out string) int {
	runtime.LockOSThread() // keep main here so the goroutine gets another thread
	done := make(chan int)
	go func() {
		runtime.LockOSThread()
		unix.Open(path, unix.O_RDONLY, 0)
		done <- unix.Gettid()
	}()
	tid := <-done
	os.WriteFile(out, []byte(fmt.Sprintf("%d %d", os.Getpid(), tid)), 0o644)
	return 0
}

// helperSpin keeps opening path from several threads, appending to log
// after each round, until killed.
func helperSpin(path, log string) int {
	runtime.LockOSThread() // the spinners get threads of their own
	for i := 0; i < 3; i++ {
		go func() {
			runtime.LockOSThread()
			for {
				if fd, err := unix.Open(path, unix.O_RDONLY, 0); err == nil {
					unix.Close(fd)
				}
				time.Sleep(20 * time.Millisecond)
			}
		}()
	}
	for {
		f, err := os.OpenFile(log, os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o644)
		if err == nil {
			f.WriteString("x\n")
			f.Close()
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// helperBench: bench KIND N OUT [GO]. Waits until the file GO exists (so a
// tracer can attach first), runs N syscalls of KIND and writes ns/op to OUT.
func helperBench(args []string) int {
	kind, out := args[0], args[2]
	n, _ := strconv.Atoi(args[1])
	if len(args) > 3 {
		for {
			if _, err := os.Stat(args[3]); err == nil {
				break
			}
			time.Sleep(time.Millisecond)
		}
	}
	start := time.Now()
	for i := 0; i < n; i++ {
		switch kind {
		case "getppid":
			unix.Getppid()
		case "open":
			if fd, err := unix.Open("/dev/null", unix.O_RDONLY, 0); err == nil {
				unix.Close(fd)
			}
		}
	}
	ns := float64(time.Since(start).Nanoseconds()) / float64(n)
	os.WriteFile(out, []byte(strconv.FormatFloat(ns, 'f', 1, 64)), 0o644)
	return 0
}

func uintptrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(&b[0])) }

// helperThreadExec execs argv from a thread that is not the leader: the
// kernel gives that thread the leader's tid.
func helperThreadExec(argv []string) int {
	runtime.LockOSThread()
	go func() {
		runtime.LockOSThread()
		err := syscall.Exec(argv[0], argv, os.Environ())
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}()
	select {}
}

// helperShortChildren: short-children N. A thread other than the leader
// forks N children that die at once, like the pidfd probe every Go
// program makes on its first fork: each fails its chdir and exits.
func helperShortChildren(n string) int {
	count, _ := strconv.Atoi(n)
	runtime.LockOSThread() // the forking goroutine gets a thread of its own
	done := make(chan int)
	go func() {
		runtime.LockOSThread()
		for i := 0; i < count; i++ {
			_, err := syscall.ForkExec("/bin/true", []string{"true"}, &syscall.ProcAttr{Dir: "/nonexistent-cudatrace-ptest", Files: []uintptr{0, 1, 2}})
			if err != syscall.ENOENT {
				fmt.Fprintln(os.Stderr, "fork:", err)
				done <- 1
				return
			}
		}
		done <- 0
	}()
	return <-done
}
