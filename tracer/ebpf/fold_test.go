package ebpf

import (
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cudatrace/cudatrace/internal/privtest"
	"github.com/cudatrace/cudatrace/tracer"
)

const (
	foldThreads = 4
	foldRounds  = 50
	// rndGetEntCnt (_IOR('R', 0x00, int)) succeeds on /dev/urandom's
	// driver, c 1:9; TCGETS there fails with ENOTTY.
	rndGetEntCnt = 0x80045200
)

// repeatCalls is the helper for TestFoldRepeats: threads racing on the
// same sites.
func repeatCalls(path string) error {
	var wg sync.WaitGroup
	errs := make(chan error, foldThreads)
	for range foldThreads {
		wg.Go(func() {
			runtime.LockOSThread()
			for range foldRounds {
				fd, err := unix.Open(path, unix.O_RDONLY, 0)
				if err != nil {
					errs <- err
					return
				}
				if _, err := unix.IoctlGetInt(fd, rndGetEntCnt); err != nil {
					errs <- fmt.Errorf("RNDGETENTCNT: %w", err)
				}
				unix.IoctlGetTermios(fd, unix.TCGETS) // fails: never folded
				unix.Close(fd)
				// A longer path read into the same slot: the fold key of
				// the next open must not pick up its tail.
				if _, err := unix.Open(path+"-absent-and-longer-than-the-node", unix.O_RDONLY, 0); err == nil {
					errs <- fmt.Errorf("%s-absent...: opened", path)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// runHelper traces spec, a run of this binary's helper, which must end
// well with nothing dropped.
func runHelper(t *testing.T, spec tracer.Spec) (*tracer.Result, *recorder) {
	t.Helper()
	rec := &recorder{}
	res, err := New().Run(privtest.Deadline(t), spec, rec)
	if err != nil {
		t.Fatal(err)
	}
	checkComplete(t, res)
	if res.Exit == nil || res.Exit.Code != 0 {
		t.Fatalf("helper exit %+v", res.Exit)
	}
	return res, rec
}

// Successful repeats past the thresholds are counted in the kernel, not
// sent; failures always arrive; sent plus counted is what the target did,
// exactly, though four threads race on each site.
func TestFoldRepeats(t *testing.T) {
	privtest.RequireRoot(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	mknod := func(path string) string {
		if err := unix.Mknod(path, unix.S_IFCHR|0o666, int(unix.Mkdev(1, 9))); err != nil {
			t.Fatalf("mknod %s: %v", path, err)
		}
		t.Cleanup(func() { os.Remove(path) })
		return path
	}
	short := mknod(fmt.Sprintf("/dev/nvidia-fold-cudatrace-test-%08x", rand.Uint32()))
	// Past FOLD_PATH_LEN: its opens are all sent (user space folds them).
	long := mknod(fmt.Sprintf("/dev/nvidia-fold-cudatrace-test-%08x-a-path-longer-than-the-kernel-fold-key", rand.Uint32()))
	const ioctlsAfter, callsAfter, total = 8, 32, foldThreads * foldRounds

	for _, tc := range []struct {
		name string
		node string
		fold bool
	}{{"fold", short, true}, {"off", short, false}, {"long-path", long, true}} {
		node, fold := tc.node, tc.fold
		t.Run(tc.name, func(t *testing.T) {
			spec := tracer.Spec{Argv: []string{self, helperArg, "repeat", node}, DeviceMajors: []uint32{1}}
			if fold {
				spec.FoldIoctlsAfter, spec.FoldCallsAfter = ioctlsAfter, callsAfter
			}
			res, rec := runHelper(t, spec)
			opens := len(rec.find(func(e *tracer.Event) bool { return e.Kind == tracer.KindOpen && e.Path == node }))
			okIoctls := len(rec.find(func(e *tracer.Event) bool { return e.Kind == tracer.KindIoctl && e.Request == rndGetEntCnt }))
			failed := len(rec.find(func(e *tracer.Event) bool { return e.Kind == tracer.KindIoctl && e.Request == unix.TCGETS }))
			if failed != total {
				t.Errorf("%d failing ioctls delivered, want all %d", failed, total)
			}
			if !fold {
				if opens != total || okIoctls != total || len(res.Folded) != 0 {
					t.Errorf("unfolded: %d opens, %d ioctls, folded %+v; want %d, %d, none", opens, okIoctls, res.Folded, total, total)
				}
				return
			}
			wantOpens := callsAfter
			if node == long {
				wantOpens = total
			}
			if opens != wantOpens || okIoctls != ioctlsAfter {
				t.Errorf("delivered %d opens and %d ioctls, want %d and the first %d", opens, okIoctls, wantOpens, ioctlsAfter)
			}
			if len(res.Folded) == 0 {
				t.Fatal("nothing folded")
			}
			pid := res.Folded[0].PID
			want := []tracer.Folded{
				{PID: pid, Kind: tracer.KindIoctl, Dev: tracer.Dev{Major: 1, Minor: 9}, Request: rndGetEntCnt, Count: total - ioctlsAfter},
			}
			if node == short {
				want = append(want, tracer.Folded{PID: pid, Kind: tracer.KindOpen, Path: node, Count: total - callsAfter})
			}
			if fmt.Sprint(res.Folded) != fmt.Sprint(want) {
				t.Errorf("folded\n %+v\nwant\n %+v", res.Folded, want)
			}
		})
	}
}
