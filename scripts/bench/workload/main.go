// Command workload is the benchmark target for scripts/bench.sh. It makes
// raw syscalls in tight loops and prints one line of key=value counts and
// timings, so the driver can compare what a tracer captured with what was
// really done (the ground truth).
//
//	workload -mode dev -path /dev/nvidia-bench-X -n 5000           W1
//	workload -mode getppid -n 200000                               W2
//	workload -mode dev -path P -n 2000 -threads 8 -procs 2         W4
//	workload -mode dev -path P -n 2000 -threads 16                 W5
//
// It is static (CGO_ENABLED=0) and uses RawSyscall so that the loop holds
// nothing but the syscalls being measured.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// rndGetEntCnt is RNDGETENTCNT (_IOR('R', 0x00, int)): a harmless ioctl that
// /dev/urandom (c 1:9) answers for any user, so W1's ioctls succeed like
// CUDA's do. Any other major-1 node answers ENOTTY, which is fine too.
const rndGetEntCnt = 0x80045200

type counts struct {
	opens, ioctls, closes, getppids uint64
	openErrs, ioctlErrs             uint64
	// first and last worker to finish (unix ns): a tracer that serves
	// its tracees unfairly lets some finish early and the rest crawl on
	// alone, so the spread shows how evenly a tracer served the workers.
	firstEnd, lastEnd int64
	nvcsw             int64 // a child's voluntary context switches
}

func (c *counts) add(o counts) {
	c.opens += o.opens
	c.ioctls += o.ioctls
	c.closes += o.closes
	c.getppids += o.getppids
	c.openErrs += o.openErrs
	c.ioctlErrs += o.ioctlErrs
	c.nvcsw += o.nvcsw
	if o.lastEnd != 0 {
		if c.lastEnd == 0 || o.firstEnd < c.firstEnd {
			c.firstEnd = o.firstEnd
		}
		c.lastEnd = max(c.lastEnd, o.lastEnd)
	}
}

// traced are the calls a device tracer records: opens of the node and
// ioctls on it (close is not traced).
func (c counts) traced() uint64   { return c.opens + c.ioctls }
func (c counts) untraced() uint64 { return c.closes + c.getppids }

func main() {
	mode := flag.String("mode", "dev", "loop: dev (openat+ioctl+close on -path) or getppid")
	path := flag.String("path", "", "device node for -mode dev")
	n := flag.Int("n", 1000, "iterations per worker")
	threads := flag.Int("threads", 1, "worker threads in this process")
	procs := flag.Int("procs", 0, "extra child processes, each running one worker")
	req := flag.Uint64("ioctl", rndGetEntCnt, "ioctl request number")
	flag.Parse()
	start := time.Now() // as early as a Go program can look: startup benchmarks use it
	if *mode != "dev" && *mode != "getppid" {
		fail("unknown -mode %q", *mode)
	}
	if *mode == "dev" && *path == "" {
		fail("-mode dev needs -path")
	}
	if *n < 0 || *threads < 1 || *procs < 0 {
		fail("-n, -threads, -procs out of range")
	}
	pathPtr, err := unix.BytePtrFromString(*path)
	if err != nil {
		fail("bad path: %v", err)
	}
	// One P per worker, so a worker stopped in a tracer never holds up
	// another.
	runtime.GOMAXPROCS(max(*threads+1, runtime.NumCPU()))

	t0 := time.Now()
	children := startChildren(*procs, *mode, *path, *n, *req)
	var total counts
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range *threads {
		wg.Go(func() {
			runtime.LockOSThread()
			c := loop(*mode, pathPtr, *n, uintptr(*req))
			c.firstEnd = time.Now().UnixNano()
			c.lastEnd = c.firstEnd
			mu.Lock()
			total.add(c)
			mu.Unlock()
		})
	}
	wg.Wait()
	for _, ch := range children {
		total.add(ch.wait())
	}
	elapsed := time.Since(t0)

	// Voluntary context switches: the loop never blocks, so each one is a
	// tracer stop (ptrace, strace). nvcsw is this process's, children's
	// are added in nvcsw_all. Like the CPU time, they include what the
	// process did before exec (a loader).
	var ru unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_SELF, &ru) // cannot fail with a valid pointer
	workers := *threads + *procs
	nsOp := 0.0
	if *n > 0 {
		nsOp = float64(elapsed.Nanoseconds()) / float64(*n)
	}
	fmt.Printf("bench-workload mode=%s threads=%d procs=%d n=%d workers=%d "+
		"opens=%d ioctls=%d closes=%d getppids=%d open_errors=%d ioctl_errors=%d "+
		"traced=%d untraced=%d loop_ns=%d ns_op=%.1f start_unix_ns=%d end_unix_ns=%d spread_ns=%d cpu_ns=%d maxrss_kb=%d nvcsw=%d nvcsw_all=%d\n",
		*mode, *threads, *procs, *n, workers,
		total.opens, total.ioctls, total.closes, total.getppids, total.openErrs, total.ioctlErrs,
		total.traced(), total.untraced(), elapsed.Nanoseconds(), nsOp, start.UnixNano(),
		total.lastEnd, total.lastEnd-total.firstEnd,
		ru.Utime.Nano()+ru.Stime.Nano(), ru.Maxrss, ru.Nvcsw, ru.Nvcsw+total.nvcsw)
	if total.openErrs > 0 {
		os.Exit(1)
	}
}

// loop is one worker. Only syscalls that really happened are counted.
func loop(mode string, path *byte, n int, req uintptr) counts {
	var c counts
	if mode == "getppid" {
		for range n {
			_, _, _ = unix.RawSyscall(unix.SYS_GETPPID, 0, 0, 0) // the syscall itself is the workload
		}
		c.getppids = uint64(n)
		return c
	}
	var val int32
	atFDCWD := unix.AT_FDCWD // a variable: the negative constant does not convert to uintptr
	p := uintptr(unsafe.Pointer(path))
	for range n {
		fd, _, errno := unix.RawSyscall6(unix.SYS_OPENAT, uintptr(atFDCWD), p,
			uintptr(unix.O_RDONLY|unix.O_CLOEXEC), 0, 0, 0)
		c.opens++
		if errno != 0 {
			c.openErrs++
			continue
		}
		_, _, errno = unix.RawSyscall(unix.SYS_IOCTL, fd, req, uintptr(unsafe.Pointer(&val)))
		c.ioctls++
		if errno != 0 {
			c.ioctlErrs++
		}
		_, _, _ = unix.RawSyscall(unix.SYS_CLOSE, fd, 0, 0) // the syscall itself is the workload
		c.closes++
	}
	runtime.KeepAlive(path)
	return c
}

type child struct {
	cmd *exec.Cmd
	out *bufio.Scanner
}

// startChildren runs extra single-threaded workers as separate processes
// (a fork and an exec each, which the tracer must follow).
func startChildren(procs int, mode, path string, n int, req uint64) []child {
	self, err := os.Executable()
	if err != nil {
		fail("find own executable: %v", err)
	}
	var out []child
	for range procs {
		cmd := exec.Command(self, "-mode", mode, "-path", path, "-n", strconv.Itoa(n),
			"-ioctl", strconv.FormatUint(req, 10))
		cmd.Stderr = os.Stderr
		pipe, err := cmd.StdoutPipe()
		if err != nil {
			fail("child: %v", err)
		}
		if err := cmd.Start(); err != nil {
			fail("start child: %v", err)
		}
		out = append(out, child{cmd, bufio.NewScanner(pipe)})
	}
	return out
}

func (ch child) wait() counts {
	var line string
	for ch.out.Scan() {
		line = ch.out.Text()
	}
	if err := ch.cmd.Wait(); err != nil {
		fail("child: %v", err)
	}
	kv := parseLine(line)
	get := func(k string) uint64 {
		v, err := strconv.ParseUint(kv[k], 10, 64)
		if err != nil {
			fail("child output %q: bad %s", line, k)
		}
		return v
	}
	end := int64(get("end_unix_ns"))
	return counts{opens: get("opens"), ioctls: get("ioctls"), closes: get("closes"),
		getppids: get("getppids"), openErrs: get("open_errors"), ioctlErrs: get("ioctl_errors"),
		firstEnd: end, lastEnd: end, nvcsw: int64(get("nvcsw_all"))}
}

// parseLine splits "bench-workload k=v k=v ..." into a map.
func parseLine(line string) map[string]string {
	kv := map[string]string{}
	for _, f := range strings.Fields(line) {
		if k, v, ok := strings.Cut(f, "="); ok {
			kv[k] = v
		}
	}
	return kv
}

func fail(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "workload: "+format+"\n", a...)
	os.Exit(2)
}
