package nvdev

import (
	"encoding/binary"
	"testing"

	"github.com/cudatrace/cudatrace/tracer"
)

func findWord(words []tracer.StatusWord, request uint32) (tracer.StatusWord, bool) {
	for _, w := range words {
		if w.Request == request {
			return w, true
		}
	}
	return tracer.StatusWord{}, false
}

// The offsets a tracer is given follow the driver version, as the decoder
// does; without a version, only layouts that agree may fold.
func TestInbandStatusWordsByVersion(t *testing.T) {
	const (
		rmControl       = 0xc020462a // NV_ESC_RM_CONTROL, NVOS54 (32 bytes)
		rmAlloc32       = 0xc020462b // NV_ESC_RM_ALLOC, NVOS21
		waitOpen        = 0xc00846da // NV_ESC_WAIT_OPEN_COMPLETE
		checkVersionStr = 0xc04846d2
		uvmAddSession   = 0xa
	)
	for _, tc := range []struct {
		version string
		request uint32
		want    tracer.StatusWord
	}{
		{"580.159.04", rmControl, tracer.StatusWord{Request: rmControl, Off: 28}},
		{"", rmControl, tracer.StatusWord{Request: rmControl, Off: 28}},
		{"580.159.04", rmAlloc32, tracer.StatusWord{Request: rmAlloc32, Off: 28}},
		{"530.30.02", rmAlloc32, tracer.StatusWord{Request: rmAlloc32, Off: 24}},
		{"", rmAlloc32, tracer.StatusWord{Request: rmAlloc32, Off: 28, KeepAll: true}},
		{"580.142", uvmAddSession, tracer.StatusWord{Request: uvmAddSession, Off: 20}},
		{"590.44.01", uvmAddSession, tracer.StatusWord{Request: uvmAddSession, Off: 4}},
		{"", uvmAddSession, tracer.StatusWord{Request: uvmAddSession, Off: 4, KeepAll: true}},
		{"580.159.04", waitOpen, tracer.StatusWord{Request: waitOpen, Off: 4, KeepAll: true}},
	} {
		got, ok := findWord(InbandStatusWords(tc.version), tc.request)
		if !ok || got != tc.want {
			t.Errorf("version %q request %#x: %+v (listed %v), want %+v", tc.version, tc.request, got, ok, tc.want)
		}
	}
	if w, ok := findWord(InbandStatusWords("580.159.04"), checkVersionStr); ok {
		t.Errorf("CHECK_VERSION_STR listed: %+v (its mismatch fails the ioctl itself)", w)
	}
}

// Every word listed is where the decoder looks: a non-zero value there,
// whether in the captured bytes or only in Event.Status, is an in-band
// failure for both the decoder and the recorder's keep rule.
func TestInbandStatusWordsMatchDecoder(t *testing.T) {
	for _, version := range []string{"", "525.60.13", "535.43.02", "580.159.04", "590.44.01"} {
		ver, haveVer := ParseDriverVersion(version)
		words := InbandStatusWords(version)
		if len(words) < 50 {
			t.Fatalf("version %q: only %d words", version, len(words))
		}
		for _, w := range words {
			dev := &tracer.Dev{Major: 195}
			if (w.Request>>8)&0xff != rmIoctlMagic {
				dev = &tracer.Dev{Major: 238} // nvidia-uvm's (dynamic) major in the H200 recordings
			}
			e := tracer.Event{Kind: tracer.KindIoctl, Request: w.Request, Dev: dev, Arg: make([]byte, 64)}
			const bad = 0x22 // NV_ERR_INVALID_CLASS
			if w.Off+4 <= uint32(len(e.Arg)) {
				binary.LittleEndian.PutUint32(e.Arg[w.Off:], bad)
			} else {
				e.Status = &tracer.ParamWord{Off: w.Off, Value: bad}
			}
			r, ok := DecodeInband(&e, ver, haveVer)
			if !ok || !r.Known || !r.Failed || r.Status != bad {
				t.Errorf("version %q %s (%#x) word @%d: decoded %+v (ok %v), want status %#x", version, IoctlName(w.Request, dev), w.Request, w.Off, r, ok, bad)
			}
			if !InbandMayHaveFailed(&e) {
				t.Errorf("version %q %#x: InbandMayHaveFailed false with %#x @%d", version, w.Request, bad, w.Off)
			}
		}
	}
}
