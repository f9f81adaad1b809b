// Command bpfstats runs a command with the kernel's BPF run-time statistics
// on (kernel.bpf_stats_enabled, through BPF_ENABLE_STATS) and prints, for
// every BPF program whose name starts with -prefix, how often it ran and
// its mean run time while the command ran. It answers "where do the
// nanoseconds per syscall go" for issue 19:
//
//	bpfstats -- cudatrace -q --device-major 1 -o r.json -- workload -mode dev -path P -n 400000
//
// With -floor it first attaches programs that return at once to the
// sys_enter and sys_exit tracepoints (as tp_btf, like cudatrace's): the
// cost a syscall pays for the hook alone, whatever the program does.
//
//	bpfstats -floor -- workload -mode getppid -n 2000000
//
// The statistics themselves cost every run two clock reads, so -floor
// -stats=false is the bare hook's cost (compare the command's own timing
// with and without it).
//
// Programs are sampled every -every while the command runs (cudatrace closes
// its programs before it exits, so the last sample is the total).
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/cudatrace/cudatrace/scripts/bench/internal/floor"
)

type sample struct {
	name    string
	runs    uint64
	runtime time.Duration
}

func main() {
	prefix := flag.String("prefix", "ct_", "programs whose name starts with this")
	withFloor := flag.Bool("floor", false, "attach do-nothing programs to sys_enter and sys_exit first")
	every := flag.Duration("every", 50*time.Millisecond, "sampling interval")
	withStats := flag.Bool("stats", true, "turn the kernel's statistics on (they cost every program run two clock reads: -floor -stats=false measures the bare hook)")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: bpfstats [-floor] [-prefix P] -- command [args...]")
		os.Exit(2)
	}
	if *withStats {
		stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
		if err != nil {
			fatal("enable BPF stats: %v", err)
		}
		defer func() { _ = stats.Close() }() // the kernel drops the statistics with the fd anyway
	}

	// Programs already loaded (a tracer still releasing its programs
	// from an earlier run) are not this command's.
	before := map[ebpf.ProgramID]sample{}
	sampleInto(before, *prefix, nil)

	if *withFloor {
		closeFloor, err := floor.Attach()
		if err != nil {
			fatal("floor programs: %v", err)
		}
		defer closeFloor()
		*prefix = floor.Prefix
	}

	cmd := exec.Command(flag.Arg(0), flag.Args()[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		fatal("%v", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	last := map[ebpf.ProgramID]sample{}
	tick := time.NewTicker(*every)
	defer tick.Stop()
	var runErr error
loop:
	for {
		sampleInto(last, *prefix, before)
		select {
		case runErr = <-done:
			break loop
		case <-tick.C:
		}
	}
	sampleInto(last, *prefix, before) // programs still loaded (-floor, or a tracer left running)
	if *withStats {
		print(last)
	}
	var exit *exec.ExitError
	if errors.As(runErr, &exit) {
		os.Exit(exit.ExitCode())
	}
}

// sampleInto records the current counters of the matching programs.
// Programs in skip are left out.
func sampleInto(into map[ebpf.ProgramID]sample, prefix string, skip map[ebpf.ProgramID]sample) {
	var id ebpf.ProgramID
	for {
		next, err := ebpf.ProgramGetNextID(id)
		if err != nil {
			return
		}
		id = next
		if _, old := skip[id]; old {
			continue
		}
		p, err := ebpf.NewProgramFromID(id)
		if err != nil {
			continue
		}
		info, err := p.Info()
		if err != nil || !strings.HasPrefix(info.Name, prefix) {
			_ = p.Close() // a program fd: nothing to flush
			continue
		}
		st, err := p.Stats()
		_ = p.Close() // a program fd: nothing to flush
		if err != nil {
			continue
		}
		into[id] = sample{name: info.Name, runs: st.RunCount, runtime: st.Runtime}
	}
}

func print(samples map[ebpf.ProgramID]sample) {
	rows := make([]sample, 0, len(samples))
	for _, s := range samples {
		rows = append(rows, s)
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].runtime > rows[j].runtime })
	fmt.Fprintf(os.Stderr, "%-24s %14s %14s %10s\n", "program", "runs", "run time ns", "ns/run")
	for _, s := range rows {
		per := 0.0
		if s.runs > 0 {
			per = float64(s.runtime.Nanoseconds()) / float64(s.runs)
		}
		fmt.Fprintf(os.Stderr, "%-24s %14d %14d %10.1f\n", s.name, s.runs, s.runtime.Nanoseconds(), per)
	}
}

func fatal(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bpfstats: "+format+"\n", args...)
	os.Exit(1)
}
