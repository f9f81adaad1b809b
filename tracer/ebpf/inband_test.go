package ebpf

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/cudatrace/cudatrace/annotate"
	"github.com/cudatrace/cudatrace/internal/privtest"
	"github.com/cudatrace/cudatrace/tracer"
)

const (
	inbandCalls   = 20 // per request
	inbandFailAt  = 14 // the 15th call carries a failure
	inbandFailure = 0x22
	// Offsets the test lists as the requests' status words: RNDGETENTCNT
	// writes its int at 0 and leaves 4 alone; FIOCLEX (the VFS answers it
	// before the driver) ignores its argument, and 100 lies past ARG_LEN.
	rndStatusOff     = 4
	fioclex          = 0x5451 // asm-generic/ioctls.h, x86 and arm64 alike
	fioclexStatusOff = 100
)

// inbandRepeat is the helper for TestInbandFailureNotFolded: inbandCalls
// successful RNDGETENTCNT and FIOCLEX ioctls on the node at path, each
// with a params block whose status word is 0 but in the 15th call.
func inbandRepeat(path string) error {
	fd, err := unix.Open(path, unix.O_RDONLY, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var params [128]byte
	for i := range inbandCalls {
		status := uint32(0)
		if i == inbandFailAt {
			status = inbandFailure
		}
		for _, c := range []struct {
			request uint32
			off     int
		}{{rndGetEntCnt, rndStatusOff}, {fioclex, fioclexStatusOff}} {
			clear(params[:])
			binary.NativeEndian.PutUint32(params[c.off:], status)
			if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(c.request), uintptr(unsafe.Pointer(&params[0]))); errno != 0 {
				return fmt.Errorf("ioctl %#x: %w", c.request, errno)
			}
		}
	}
	return nil
}

// A successful ioctl whose params report a failure is evidence: the kernel
// sends it however often its site repeated, with the status word (even one
// past the bytes of params it copies), and the counts stay exact.
func TestInbandFailureNotFolded(t *testing.T) {
	privtest.RequireRoot(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	node := fmt.Sprintf("/dev/nvidia-inband-cudatrace-test-%08x", rand.Uint32())
	if err := unix.Mknod(node, unix.S_IFCHR|0o666, int(unix.Mkdev(1, 9))); err != nil { // /dev/urandom's driver
		t.Fatalf("mknod %s: %v", node, err)
	}
	t.Cleanup(func() { os.Remove(node) })
	const after = 8
	listed := []tracer.StatusWord{{Request: rndGetEntCnt, Off: rndStatusOff}, {Request: fioclex, Off: fioclexStatusOff}}
	// The real table rides along: it must fit the map beside the test's.
	real := annotate.InbandStatusWords("")
	for _, w := range real {
		if w.Request == rndGetEntCnt || w.Request == fioclex {
			t.Fatalf("annotate lists %#x, which the test uses", w.Request)
		}
	}

	for _, tc := range []struct {
		name      string
		words     []tracer.StatusWord
		listed    bool // the test's requests are in words
		delivered int  // per request
	}{
		{"listed", append(real, listed...), true, after + 1},
		// Without the table, the failure is one of the folded repeats.
		{"unlisted", real, false, after},
		{"keep-all", []tracer.StatusWord{
			{Request: rndGetEntCnt, Off: rndStatusOff, KeepAll: true},
			{Request: fioclex, Off: fioclexStatusOff, KeepAll: true},
		}, true, inbandCalls},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := tracer.Spec{
				Argv:            []string{self, helperArg, "inband-repeat", node},
				DeviceMajors:    []uint32{1},
				FoldIoctlsAfter: after,
				InbandStatus:    tc.words,
			}
			rec := &recorder{}
			res, err := New().Run(privtest.Deadline(t), spec, rec)
			if err != nil {
				t.Fatal(err)
			}
			checkComplete(t, res)
			if res.Exit == nil || res.Exit.Code != 0 {
				t.Fatalf("helper exit %+v", res.Exit)
			}
			for _, w := range listed {
				got := rec.find(func(e *tracer.Event) bool { return e.Kind == tracer.KindIoctl && e.Request == w.Request })
				var folded uint64
				for _, f := range res.Folded {
					if f.Kind == tracer.KindIoctl && f.Request == w.Request {
						folded += f.Count
					}
				}
				if len(got) != tc.delivered || uint64(len(got))+folded != inbandCalls {
					t.Errorf("ioctl %#x: %d delivered + %d folded, want %d + %d", w.Request, len(got), folded, tc.delivered, inbandCalls-tc.delivered)
				}
				var failures []*tracer.Event
				for _, e := range got {
					if len(e.Arg) != int(bpfLimitsARG_LEN) {
						t.Errorf("ioctl %#x: %d bytes of params, want %d", w.Request, len(e.Arg), bpfLimitsARG_LEN)
					}
					switch {
					case !tc.listed && e.Status != nil:
						t.Errorf("ioctl %#x not listed: status %+v", w.Request, *e.Status)
					case tc.listed && (e.Status == nil || e.Status.Off != w.Off):
						t.Fatalf("ioctl %#x: status %+v, want the word @%d", w.Request, e.Status, w.Off)
					case tc.listed && e.Status.Value != 0:
						failures = append(failures, e)
					}
				}
				if !tc.listed {
					continue
				}
				if len(failures) != 1 || failures[0].Status.Value != inbandFailure {
					t.Errorf("ioctl %#x: in-band failures delivered: %d (want 1 with status %#x)", w.Request, len(failures), inbandFailure)
				} else if tc.delivered == after+1 && failures[0] != got[len(got)-1] {
					t.Errorf("ioctl %#x: the failure is not the one delivered past the first %d", w.Request, after)
				}
			}
		})
	}
}
