package ebpf

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cudatrace/cudatrace/internal/privtest"
	"github.com/cudatrace/cudatrace/tracer"
)

const limitRounds = 5

// limitCalls is the helper for TestLimitCalls: with RLIMIT_NOFILE 0 every
// new fd fails EMFILE, and a mapping larger than any address space fails
// ENOMEM; then a successful eventfd and mmap, which must not be sent.
func limitCalls() error {
	var old unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &old); err != nil {
		return err
	}
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: 0, Max: old.Max}); err != nil {
		return err
	}
	var p [2]int
	for range limitRounds {
		for _, call := range []func() error{
			func() error { _, err := unix.Eventfd(0, 0); return err },
			func() error { return unix.Pipe2(p[:], 0) },
			func() error { _, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0); return err },
			func() error { _, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM, 0); return err },
		} {
			if err := call(); !errors.Is(err, unix.EMFILE) {
				return fmt.Errorf("under RLIMIT_NOFILE 0: %v, want EMFILE", err)
			}
		}
		if _, err := unix.Mmap(-1, 0, 1<<50, unix.PROT_NONE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE); !errors.Is(err, unix.ENOMEM) {
			return fmt.Errorf("1 PiB mmap: %v, want ENOMEM", err)
		}
	}
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &old); err != nil {
		return err
	}
	fd, err := unix.Eventfd(0, 0)
	if err != nil {
		return err
	}
	unix.Close(fd)
	m, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return err
	}
	return unix.Munmap(m)
}

// The fd and address-space calls a limit fails arrive, as the call and its
// errno; the successful ones do not; repeats fold per (call, errno).
func TestLimitCalls(t *testing.T) {
	privtest.RequireRoot(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"eventfd2 EMFILE", "mmap ENOMEM", "pipe2 EMFILE", "socket EMFILE", "socketpair EMFILE"}
	for _, fold := range []bool{false, true} {
		t.Run(fmt.Sprintf("fold=%v", fold), func(t *testing.T) {
			spec := tracer.Spec{Argv: []string{self, helperArg, "limits", "-"}}
			const after = 2
			if fold {
				spec.FoldCallsAfter = after
			}
			res, rec := runHelper(t, spec)
			count := map[string]int{}
			pids := map[int]bool{}
			for _, e := range rec.find(func(e *tracer.Event) bool { return e.Kind == tracer.KindLimit }) {
				pids[e.PID] = true
				if e.PID == 0 || e.TID == 0 || e.Comm == "" || e.Path != "" || e.Seq == 0 {
					t.Errorf("event %+v", e)
				}
				count[e.Syscall+" "+e.ErrnoName()]++
			}
			sent := limitRounds
			if fold {
				sent = after
			}
			var got []string
			for site, n := range count {
				got = append(got, site)
				if n != sent {
					t.Errorf("%s sent %d times, want %d", site, n, sent)
				}
			}
			slices.Sort(got)
			if len(pids) != 1 {
				t.Errorf("limit failures from processes %v, want the helper alone", pids)
			}
			if !slices.Equal(got, want) {
				t.Errorf("limit failures %v, want %v", got, want)
			}
			var folded []string
			for _, f := range res.Folded {
				if f.Kind != tracer.KindLimit {
					continue
				}
				folded = append(folded, f.Path+" "+unix.ErrnoName(syscall.Errno(f.Errno)))
				if f.Count != limitRounds-after {
					t.Errorf("%s folded %d, want %d", f.Path, f.Count, limitRounds-after)
				}
			}
			slices.Sort(folded)
			if fold && !slices.Equal(folded, want) || !fold && len(folded) != 0 {
				t.Errorf("folded %v", folded)
			}
		})
	}
}
