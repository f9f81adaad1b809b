package ebpf

import (
	"os"
	"testing"

	"github.com/cudatrace/cudatrace/internal/fakeinband"
	"github.com/cudatrace/cudatrace/internal/privtest"
	"github.com/cudatrace/cudatrace/nvdev"
	"github.com/cudatrace/cudatrace/tracer"
)

// A successful ioctl whose params report a failure is evidence: the kernel
// sends it however often its site repeated, with the status word (even one
// past the bytes of params it copies), and the counts stay exact.
func TestInbandFailureNotFolded(t *testing.T) {
	privtest.RequireRoot(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	node := fakeinband.Node(t)
	const after = 8
	listed := fakeinband.Words(false)
	// The real table rides along: it must fit the map beside the test's.
	real := nvdev.InbandStatusWords("")
	for _, w := range real {
		if w.Request == listed[0].Request || w.Request == listed[1].Request {
			t.Fatalf("nvdev lists %#x, which the test uses", w.Request)
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
		{"keep-all", fakeinband.Words(true), true, fakeinband.Calls},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := tracer.Spec{
				Argv:            []string{self, helperArg, "inband-repeat", node},
				DeviceMajors:    []uint32{1},
				FoldIoctlsAfter: after,
				InbandStatus:    tc.words,
			}
			res, rec := runHelper(t, spec)
			for _, w := range listed {
				got := rec.find(func(e *tracer.Event) bool { return e.Kind == tracer.KindIoctl && e.Request == w.Request })
				var folded uint64
				for _, f := range res.Folded {
					if f.Kind == tracer.KindIoctl && f.Request == w.Request {
						folded += f.Count
					}
				}
				if len(got) != tc.delivered || uint64(len(got))+folded != fakeinband.Calls {
					t.Errorf("ioctl %#x: %d delivered + %d folded, want %d + %d", w.Request, len(got), folded, tc.delivered, fakeinband.Calls-tc.delivered)
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
				if len(failures) != 1 || failures[0].Status.Value != fakeinband.Failure {
					t.Errorf("ioctl %#x: in-band failures delivered: %d (want 1 with status %#x)", w.Request, len(failures), fakeinband.Failure)
				} else if tc.delivered == after+1 && failures[0] != got[len(got)-1] {
					t.Errorf("ioctl %#x: the failure is not the one delivered past the first %d", w.Request, after)
				}
			}
		})
	}
}
