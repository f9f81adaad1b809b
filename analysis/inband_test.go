package analysis

import (
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cudatrace/cudatrace/nvdev"
	"github.com/cudatrace/cudatrace/snapshot"
	"github.com/cudatrace/cudatrace/tracer"
)

// recording is the part of a testdata/gpu report this package needs (the
// report package imports analysis, so it cannot be used here).
type recording struct {
	Events   []tracer.Event     `json:"events"`
	Snapshot *snapshot.Snapshot `json:"snapshot"`
}

func loadRecording(t *testing.T, state string) recording {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "testdata", "gpu", state, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	var r recording
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// firstIoctl returns a copy of the first recorded ioctl with request req.
func firstIoctl(t *testing.T, r recording, req uint32) tracer.Event {
	t.Helper()
	for _, e := range r.Events {
		if e.Kind == tracer.KindIoctl && e.Request == req {
			return e.Copy()
		}
	}
	t.Fatalf("no ioctl %#x in the recording", req)
	return tracer.Event{}
}

func statusCode(t *testing.T, name string) uint32 {
	t.Helper()
	for code := uint32(0); code < 1<<17; code++ {
		if nvdev.StatusShort(code) == name {
			return code
		}
	}
	t.Fatalf("no NV_STATUS %s", name)
	return 0
}

func setU32(e *tracer.Event, off int, v uint32) { binary.LittleEndian.PutUint32(e.Arg[off:], v) }

var v580 = nvdev.DriverVersion{580, 159, 4}

// TestDecodeInbandRecorded decodes params captured on the H200 (driver
// 580.159.04, eBPF backend) for each escape with a status.
func TestDecodeInbandRecorded(t *testing.T) {
	rec := loadRecording(t, "1-healthy-root-torch")
	cases := []struct {
		req            uint32
		escape, object string
		field          string
		statusOff      int
	}{
		{0xc030462b, "NV_ESC_RM_ALLOC", "class=NV01_ROOT_CLIENT", "status", 40},
		{0xc020462a, "NV_ESC_RM_CONTROL", "cmd=NV0000_CTRL_CMD_SYSTEM_GET_BUILD_VERSION", "status", 28},
		{0xc0104629, "NV_ESC_RM_FREE", "", "status", 12},
		{0xc038464e, "NV_ESC_RM_MAP_MEMORY", "", "status", 40},
		{0xc0384627, "NV_ESC_RM_ALLOC_MEMORY", "class=NV01_MEMORY_SYSTEM_OS_DESCRIPTOR", "status", 40},
		{0xc01046ce, "NV_ESC_ALLOC_OS_EVENT", "", "status", 12},
		{0xc028465e, "NV_ESC_RM_UPDATE_DEVICE_MAPPING_INFO", "", "status", 32},
		{0xc00846da, "NV_ESC_WAIT_OPEN_COMPLETE", "", "adapterStatus", 4},
		{0x30000001, "UVM_INITIALIZE", "", "rmStatus", 8},
		{0x4b, "UVM_MM_INITIALIZE", "", "rmStatus", 4},
		{0x27, "UVM_PAGEABLE_MEM_ACCESS", "", "rmStatus", 4},
		{0x25, "UVM_REGISTER_GPU", "", "rmStatus", 36},
		{0x17, "UVM_CREATE_RANGE_GROUP", "", "rmStatus", 8},
		{0x19, "UVM_REGISTER_GPU_VASPACE", "", "rmStatus", 28},
		{0x1b, "UVM_REGISTER_CHANNEL", "", "rmStatus", 48},
	}
	invalid := statusCode(t, "NV_ERR_INVALID_STATE")
	for _, c := range cases {
		e := firstIoctl(t, rec, c.req)
		r, ok := nvdev.DecodeInband(&e, v580, true)
		if !ok || r.Escape != c.escape || r.Object != c.object || r.Field != c.field || !r.Known || r.Failed || r.Assumed {
			t.Errorf("%#x: got %+v ok=%v, want %s %q healthy", c.req, r, ok, c.escape, c.object)
			continue
		}
		// The same block with an error where the driver writes it.
		setU32(&e, c.statusOff, invalid)
		r, _ = nvdev.DecodeInband(&e, v580, true)
		if !r.Failed || r.Status != invalid || r.StatusText() != c.field+" NV_ERR_INVALID_STATE" {
			t.Errorf("%#x with status @%d set: %+v %q", c.req, c.statusOff, r, r.StatusText())
		}
		if !nvdev.InbandMayHaveFailed(&e) {
			t.Errorf("%#x: nvdev.InbandMayHaveFailed false for a failed status", c.req)
		}
	}
	// The version check: libcuda's string and the RECOGNIZED reply.
	e := firstIoctl(t, rec, 0xc04846d2)
	r, _ := nvdev.DecodeInband(&e, v580, true)
	if !r.Known || r.Failed || r.Version != "580.159.04" {
		t.Errorf("CHECK_VERSION_STR: %+v", r)
	}
	setU32(&e, 4, 0) // NV_RM_API_VERSION_REPLY_UNRECOGNIZED
	if r, _ := nvdev.DecodeInband(&e, v580, true); !r.Failed || r.StatusText() != "reply UNRECOGNIZED" {
		t.Errorf("CHECK_VERSION_STR unrecognised: %+v", r)
	}
	// No params beyond the 16-byte XFER header, no status: nothing claimed.
	if _, ok := nvdev.DecodeInband(&tracer.Event{Kind: tracer.KindIoctl, Request: 0xc01046d3, Dev: dev(195, 255), Arg: make([]byte, 16)}, v580, true); ok {
		t.Error("XFER_CMD decoded although its params were not captured")
	}
	// A status far beyond the captured bytes is said to be unknown.
	e = firstIoctl(t, rec, 0x21) // UVM_MAP_EXTERNAL_ALLOCATION, rmStatus @9260
	r, _ = nvdev.DecodeInband(&e, v580, true)
	if r.Known || !strings.Contains(r.Missing, "rmStatus @9260 lies beyond the 64 bytes captured") {
		t.Errorf("MAP_EXTERNAL_ALLOCATION: %+v", r)
	}
}

// TestInbandLayoutsByVersion: the same request decodes at the offset its
// driver version uses (nvidia-abi.json: NVOS21 status @24 up to 530, @28
// from 535.43.02; UVM_FREE rmStatus @16 up to 580, @8 from 590.44.01).
func TestInbandLayoutsByVersion(t *testing.T) {
	arg := make([]byte, 64)
	binary.LittleEndian.PutUint32(arg[12:], 0xc56f) // hClass
	binary.LittleEndian.PutUint32(arg[24:], 0x22)   // @24: NV_ERR_INVALID_CLASS on <= 530
	e := tracer.Event{Kind: tracer.KindIoctl, FD: 8, Request: 0xc020462b, Dev: dev(195, 255), Arg: arg}
	if r, _ := nvdev.DecodeInband(&e, nvdev.DriverVersion{530, 41, 3}, true); !r.Failed || r.Status != 0x22 {
		t.Errorf("530.41.03: %+v", r)
	}
	if r, _ := nvdev.DecodeInband(&e, nvdev.DriverVersion{535, 43, 2}, true); r.Failed || !r.Known {
		t.Errorf("535.43.02 reads @28 (zero): %+v", r)
	}
	if got := nvdev.FormatCall(&e); got != "ioctl(8, NV_ESC_RM_ALLOC class=AMPERE_CHANNEL_GPFIFO_A)" {
		t.Errorf("FormatCall = %q", got)
	}
	if got := nvdev.InbandResult(&e, "530.41.03"); got != "status NV_ERR_INVALID_CLASS" {
		t.Errorf("InbandResult = %q", got)
	}
	if r, _ := nvdev.DecodeInband(&e, nvdev.DriverVersion{}, false); !r.Assumed {
		t.Errorf("unknown version: newest layout not marked assumed: %+v", r)
	}

	free := tracer.Event{Kind: tracer.KindIoctl, FD: 9, Request: 0x22, Dev: dev(238, 0), Arg: make([]byte, 64)}
	binary.LittleEndian.PutUint32(free.Arg[16:], 0x1f)
	if r, _ := nvdev.DecodeInband(&free, v580, true); !r.Failed {
		t.Errorf("UVM_FREE on 580.159.04 reads @16: %+v", r)
	}
	if r, _ := nvdev.DecodeInband(&free, nvdev.DriverVersion{590, 48, 1}, true); r.Failed {
		t.Errorf("UVM_FREE on 590.48.01 reads @8: %+v", r)
	}
}

// inbandRun is a CUDA start where the driver refuses a channel class in
// band, after a feature probe that libcuda ignores, and cuInit returns ret.
func inbandRun(apiRet int64) []tracer.Event {
	ctl := dev(195, 255)
	probe := make([]byte, 64)
	binary.LittleEndian.PutUint32(probe[8:], 0x20800110) // cmd
	binary.LittleEndian.PutUint32(probe[28:], 0x56)      // NV_ERR_NOT_SUPPORTED
	alloc := make([]byte, 64)
	binary.LittleEndian.PutUint32(alloc[12:], 0xc86f) // HOPPER_CHANNEL_GPFIFO_A
	binary.LittleEndian.PutUint32(alloc[40:], 0x22)   // NV_ERR_INVALID_CLASS
	b := newEvents(900, "python3").
		open("/dev/nvidiactl", 0o2000002, 8, ctl).
		add(tracer.Event{Kind: tracer.KindIoctl, FD: 8, Request: 0xc020462a, Dev: ctl, Arg: probe}).
		add(tracer.Event{Kind: tracer.KindIoctl, FD: 8, Request: 0xc030462b, Dev: ctl, Arg: alloc})
	if apiRet >= 0 {
		b.add(tracer.Event{Kind: tracer.KindAPI, Func: "cuInit", Path: "/usr/lib/x86_64-linux-gnu/libcuda.so.1", Ret: apiRet})
	}
	return b.evs
}

func TestInbandPrimeSuspect(t *testing.T) {
	a := Analyze(inbandRun(999), h200())
	if a.Failing == nil || a.Failing.Request != 0xc030462b {
		t.Fatalf("failing = %+v, want the RM_ALLOC", a.Failing)
	}
	f := find(t, a, "rm-status-failed")
	if f.Severity != SeverityError {
		t.Errorf("severity %s", f.Severity)
	}
	mustContain(t, "verdict", a.Verdict, "NV_ESC_RM_ALLOC class=HOPPER_CHANNEL_GPFIFO_A", "status NV_ERR_INVALID_CLASS")
	mustContain(t, "detail", detail(f), "cuInit then returned CUDA_ERROR_UNKNOWN (999)", "a feature probe", "NV2080_CTRL_CMD")
	mustContain(t, "fix", f.Fix, "580.159.04")
}

func TestInbandWhenCUDAOutcomeDiffers(t *testing.T) {
	// CUDA succeeded: the refusal is context, not a verdict.
	a := Analyze(inbandRun(0), h200())
	if a.Failing != nil {
		t.Errorf("failing = %+v although cuInit returned 0", a.Failing)
	}
	if f := find(t, a, "rm-status-failed"); f.Severity != SeverityInfo || !strings.Contains(detail(f), "CUDA succeeded") {
		t.Errorf("%+v", f)
	}
	// Unknown outcome: a warning that names it the prime suspect.
	a = Analyze(inbandRun(-1), h200())
	if f := find(t, a, "rm-status-failed"); f.Severity != SeverityWarning || !strings.Contains(detail(f), "prime suspect") {
		t.Errorf("%+v", f)
	}
	if a.Verdict == "No NVIDIA device call failed." || !strings.Contains(a.Verdict, "NV_ERR_INVALID_CLASS") {
		t.Errorf("verdict %q hides the in-band failure", a.Verdict)
	}
}

// healthyStates are the real H200 runs where CUDA worked.
var healthyStates = []string{"1-healthy-root-cuinit", "1-healthy-root-torch", "1-healthy-nobody-cuinit", "1-healthy-nobody-torch", "8-ptrace-healthy-torch"}

// TestHealthyRecordingsInbandExpected: every in-band failure libcuda makes
// on a healthy start is known (learnedInband or a rule), so healthy runs
// carry no in-band finding.
func TestHealthyRecordingsInbandExpected(t *testing.T) {
	for _, st := range healthyStates {
		rec := loadRecording(t, st)
		a := &analyzer{ev: rec.Events, s: rec.Snapshot, fail: -1, retry: -1, byID: map[string]bool{}}
		n := 0
		for i := range rec.Events {
			if e := &rec.Events[i]; e.Kind == tracer.KindIoctl && !e.Failed() {
				if _, ok := nvdev.DecodeInband(e, v580, true); ok {
					n++
				}
			}
		}
		if n < 20 {
			t.Errorf("%s: only %d ioctls with an in-band status decoded", st, n)
		}
		for _, f := range a.inbandFailures() {
			if f.expected == "" {
				t.Errorf("%s: unexpected in-band failure on a healthy start: %s %s; add it to learnedInband", st, nvdev.FormatCall(&rec.Events[f.i]), f.r.StatusText())
			}
		}
		res := Analyze(rec.Events, rec.Snapshot)
		for _, id := range []string{"rm-status-failed", "uvm-status-failed"} {
			if slices.Contains(ids(res), id) {
				t.Errorf("%s: finding %s on a healthy run", st, id)
			}
		}
	}
}
