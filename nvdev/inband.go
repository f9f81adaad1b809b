package nvdev

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"

	"github.com/cudatrace/cudatrace/tracer"
)

// Most RM and UVM failures do not fail ioctl(2): it returns 0 and the params
// block says what went wrong (an NV_STATUS in status/rmStatus, the reply of
// the version check, the result of a deferred open). This file reads those
// fields from the bytes the tracer captured after the call, using the
// per-version layouts in nvtables.go.

// DriverVersion is a driver version, 580.159.04 → {580, 159, 4}.
type DriverVersion [3]int

// Less reports whether v is an older version than o.
func (v DriverVersion) Less(o DriverVersion) bool {
	for i := range v {
		if v[i] != o[i] {
			return v[i] < o[i]
		}
	}
	return false
}

// ParseDriverVersion reads "580.159.04" (two or three parts).
func ParseDriverVersion(s string) (DriverVersion, bool) {
	var v DriverVersion
	parts := strings.Split(strings.TrimSpace(s), ".")
	if len(parts) < 2 || len(parts) > 3 {
		return v, false
	}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return v, false
		}
		v[i] = n
	}
	return v, true
}

// paramLayout is where one params layout keeps its status; the generated
// tables list them per request, oldest first.
type paramLayout struct {
	Size   uint32        // params size in bytes
	From   DriverVersion // the first driver version with this layout
	Status int           // byte offset of the NV_STATUS
	Source string        // the struct and version range it comes from
}

// pickLayout chooses, among layouts (for one request), the one of size (0:
// any) that the driver ver uses: the newest whose From is not after ver.
// Without a version the newest is taken and assumed is set.
func pickLayout(layouts []paramLayout, size uint32, ver DriverVersion, haveVer bool) (l paramLayout, assumed, ok bool) {
	for _, c := range layouts {
		if size != 0 && c.Size != size {
			continue
		}
		if haveVer && ver.Less(c.From) {
			continue
		}
		if !ok || l.From.Less(c.From) {
			l, ok = c, true
		}
	}
	if !ok && haveVer {
		// Older than every known layout: the oldest is the best guess.
		for _, c := range layouts {
			if (size == 0 || c.Size == size) && (!ok || c.From.Less(l.From)) {
				l, ok = c, true
			}
		}
		return l, true, ok
	}
	return l, !haveVer && ok, ok
}

// Inband is what an NVIDIA ioctl's params block reports.
type Inband struct {
	Escape string // NV_ESC_RM_ALLOC, UVM_REGISTER_GPU
	// Object names what the request was about: "class=HOPPER_CHANNEL_GPFIFO_A",
	// "cmd=NV2080_CTRL_CMD_GPU_GET_INFO_V2".
	Object string
	Field  string // status, rmStatus, adapterStatus, reply
	Status uint32 // the NV_STATUS read (reply: 1 recognized, 0 not)
	Known  bool   // Status was read from the captured bytes
	Failed bool   // Known and not success
	// Assumed: the driver version was unknown, so the newest layout was used.
	Assumed bool
	// Missing says why the status is unknown ("rmStatus @9260 lies beyond
	// the 64 bytes captured").
	Missing string
	RC      int32 // WAIT_OPEN_COMPLETE: the deferred open's rc
	// Version: CHECK_VERSION_STR's versionString after the call.
	Version string
}

const (
	nvRMAPIVersionReplyRecognized = 1 // nv-ioctl.h NV_RM_API_VERSION_REPLY_RECOGNIZED
	rmIoctlSizeShift              = 16
	rmIoctlSizeMask               = 0x3fff
)

// u32At reads a little-endian NvU32 at off, if it was captured.
func u32At(b []byte, off int) (uint32, bool) {
	if off < 0 || off+4 > len(b) {
		return 0, false
	}
	return binary.LittleEndian.Uint32(b[off:]), true
}

// rmField is a named field offset from the generated table; -1 when absent.
func rmField(esc, field string) int {
	if off, ok := rmFieldOffsets[esc+"."+field]; ok {
		return off
	}
	return -1
}

// rmObject names the class or control command a params block is about.
func rmObject(esc string, arg []byte) string {
	if off := rmField(esc, "hClass"); off >= 0 {
		if c, ok := u32At(arg, off); ok {
			return "class=" + className(c)
		}
	}
	if off := rmField(esc, "cmd"); off >= 0 {
		if c, ok := u32At(arg, off); ok {
			return "cmd=" + controlName(c)
		}
	}
	return ""
}

func className(c uint32) string {
	if n, ok := rmClassNames[c]; ok {
		return n
	}
	return fmt.Sprintf("%#x", c)
}

func controlName(c uint32) string {
	if n, ok := rmControlNames[c]; ok {
		return n
	}
	return fmt.Sprintf("%#x", c)
}

// DecodeInband reads the in-band result of an NVIDIA ioctl. ok is false for
// calls that carry none (not an NVIDIA ioctl, a failed ioctl: the errno is
// the result, or an escape without a status field).
func DecodeInband(e *tracer.Event, ver DriverVersion, haveVer bool) (r Inband, ok bool) {
	if e.Kind != tracer.KindIoctl || e.Failed() || e.NoReturn {
		return r, false
	}
	name := IoctlName(e.Request, e.Dev)
	if layouts, isUVM := uvmStatusLayouts[e.Request]; isUVM && strings.HasPrefix(name, "UVM_") {
		r.Escape, r.Field = name, "rmStatus"
		l, assumed, found := pickLayout(layouts, 0, ver, haveVer)
		if !found {
			return r, false
		}
		r.Assumed = assumed
		r.read(e, l)
		return r, true
	}
	if !strings.HasPrefix(name, "NV_ESC_") {
		return r, false
	}
	r.Escape = name
	nr := e.Request & 0xff
	switch nr {
	case EscCheckVersionStr:
		r.Field = "reply"
		off := rmField("NV_ESC_CHECK_VERSION_STR", "reply")
		if v, got := u32At(e.Arg, off); got {
			r.Status, r.Known = v, true
			r.Failed = v != nvRMAPIVersionReplyRecognized
		} else {
			r.Missing = "reply was not captured"
		}
		if off := rmField("NV_ESC_CHECK_VERSION_STR", "versionString"); off >= 0 && len(e.Arg) > off {
			r.Version = CString(e.Arg[off:])
		}
		return r, true
	case EscWaitOpenComplete:
		r.Field = "adapterStatus"
		rc, st, got := WaitOpenResult(e)
		if got {
			r.RC, r.Status, r.Known = rc, st, true
			r.Failed = rc != 0 || st != 0
		} else {
			r.Missing = "rc and adapterStatus were not captured"
		}
		return r, true
	case escIoctlXferCmd:
		// The real params sit behind the pointer at @8; only this
		// 16-byte header was captured.
		return r, false
	}
	layouts, has := rmStatusLayouts[nr]
	if !has {
		return r, false
	}
	r.Field = "status"
	r.Object = rmObject(name, e.Arg)
	size := (e.Request >> rmIoctlSizeShift) & rmIoctlSizeMask
	l, assumed, found := pickLayout(layouts, size, ver, haveVer)
	if !found {
		r.Missing = fmt.Sprintf("no known %s layout of %d bytes", name, size)
		return r, true
	}
	r.Assumed = assumed
	r.read(e, l)
	return r, true
}

// paramWordAt reads the params word at off: from the captured leading
// bytes, else from the word the tracer read there (Event.Status: a status
// past the bytes captured).
func paramWordAt(e *tracer.Event, off int) (uint32, bool) {
	if v, ok := u32At(e.Arg, off); ok {
		return v, true
	}
	if s := e.Status; s != nil && off >= 0 && int64(s.Off) == int64(off) {
		return s.Value, true
	}
	return 0, false
}

func (r *Inband) read(e *tracer.Event, l paramLayout) {
	if v, got := paramWordAt(e, l.Status); got {
		r.Status, r.Known, r.Failed = v, true, v != 0
		return
	}
	if len(e.Arg) == 0 {
		r.Missing = r.Field + " was not captured"
		return
	}
	r.Missing = fmt.Sprintf("%s @%d lies beyond the %d bytes captured", r.Field, l.Status, len(e.Arg))
}

// StatusText is the in-band result as the timeline shows it: "status
// NV_ERR_INVALID_CLASS", "reply UNRECOGNIZED", "rc -5, adapterStatus
// NV_ERR_...".
func (r Inband) StatusText() string {
	if !r.Known {
		return ""
	}
	switch r.Field {
	case "reply":
		if r.Failed {
			return "reply UNRECOGNIZED"
		}
		return ""
	case "adapterStatus":
		if r.RC != 0 {
			return fmt.Sprintf("rc %d, adapterStatus %s", r.RC, StatusShort(r.Status))
		}
	}
	if !r.Failed {
		return ""
	}
	return r.Field + " " + StatusShort(r.Status)
}

// DriverVersionOf is the version whose layouts apply: the kernel module's,
// else the one libcuda's version check carried (equal when it passed).
func DriverVersionOf(hostVersion string, events []tracer.Event) (DriverVersion, bool) {
	if v, ok := ParseDriverVersion(hostVersion); ok {
		return v, true
	}
	for i := range events {
		e := &events[i]
		if e.Kind == tracer.KindIoctl && !e.Failed() && IsRMRequest(e, EscCheckVersionStr) && len(e.Arg) > 8 {
			if v, ok := ParseDriverVersion(CString(e.Arg[8:])); ok {
				return v, true
			}
		}
	}
	return DriverVersion{}, false
}

// InbandResult renders the in-band failure of an ioctl that returned 0, for
// the timeline and the failing-call line: "status NV_ERR_INVALID_CLASS", or
// "" when the params report success or nothing. driverVersion picks the
// params layout ("" when unknown: the newest is assumed).
func InbandResult(e *tracer.Event, driverVersion string) string {
	v, ok := ParseDriverVersion(driverVersion)
	r, has := DecodeInband(e, v, ok)
	if !has {
		return ""
	}
	return r.StatusText()
}

// InbandMayHaveFailed is whether any known layout of e's request shows a
// non-zero status, or the tracer read one (Event.Status): the recorder
// keeps such calls verbatim whatever the driver version, so a fold never
// hides an in-band failure.
func InbandMayHaveFailed(e *tracer.Event) bool {
	if e.Kind != tracer.KindIoctl || e.Failed() || (len(e.Arg) == 0 && e.Status == nil) {
		return false
	}
	if e.Status != nil && e.Status.Value != 0 {
		// The tracer read a failure where the request keeps its result
		// (InbandStatusWords): the eBPF backend sent it unfolded for that.
		return true
	}
	var layouts []paramLayout
	switch name := IoctlName(e.Request, e.Dev); {
	case strings.HasPrefix(name, "UVM_"):
		layouts = uvmStatusLayouts[e.Request]
	case strings.HasPrefix(name, "NV_ESC_"):
		nr := e.Request & 0xff
		if nr == EscCheckVersionStr || nr == EscWaitOpenComplete {
			r, _ := DecodeInband(e, DriverVersion{}, false)
			return r.Failed
		}
		size := (e.Request >> rmIoctlSizeShift) & rmIoctlSizeMask
		for _, l := range rmStatusLayouts[nr] {
			if l.Size == size {
				layouts = append(layouts, l)
			}
		}
	}
	for _, l := range layouts {
		if v, ok := paramWordAt(e, l.Status); ok && v != 0 {
			return true
		}
	}
	return false
}

// CString is the NUL-terminated printable string at the start of b, ""
// when it holds an unprintable byte.
func CString(b []byte) string {
	for i, c := range b {
		if c == 0 {
			b = b[:i]
			break
		}
		if c < 0x20 || c > 0x7e {
			return ""
		}
	}
	return string(b)
}
