package nvdev

import (
	"cmp"
	"slices"

	"github.com/cudatrace/cudatrace/tracer"
)

// rmIoctlDirRW is _IOC_READ|_IOC_WRITE in a request's top bits: libcuda
// issues every escape as _IOWR('F', nr, params) (nv-ioctl.h __NV_IOWR).
const rmIoctlDirRW = 3 << 30

// rmRequest is the request number libcuda uses for escape nr with a
// params block of size bytes.
func rmRequest(nr, size uint32) uint32 {
	return rmIoctlDirRW | size<<rmIoctlSizeShift | rmIoctlMagic<<8 | nr
}

// InbandStatusWords lists, for tracer.Spec.InbandStatus, where each
// NVIDIA request with an in-band status keeps it under driverVersion
// ("580.159.04"; "" when unknown), from the same layouts decodeInband
// reads. RM escapes are listed once per known params size, as libcuda
// encodes them (rmRequest); UVM requests as they are. Without a version,
// the newest layout's offset is listed (as decodeInband assumes), and a
// request whose layouts disagree keeps all its calls.
//
// NV_ESC_CHECK_VERSION_STR is not listed: a mismatch fails the ioctl
// itself (EINVAL), which is never folded. NV_ESC_WAIT_OPEN_COMPLETE keeps
// all its calls: its rc is a second result beside adapterStatus.
func InbandStatusWords(driverVersion string) []tracer.StatusWord {
	ver, haveVer := ParseDriverVersion(driverVersion)
	var out []tracer.StatusWord
	add := func(request uint32, layouts []paramLayout, size uint32) {
		l, _, ok := pickLayout(layouts, size, ver, haveVer)
		if !ok {
			return
		}
		w := tracer.StatusWord{Request: request, Off: uint32(l.Status)}
		for _, c := range layouts {
			if !haveVer && (size == 0 || c.Size == size) && c.Status != l.Status {
				w.KeepAll = true
			}
		}
		out = append(out, w)
	}
	for nr, layouts := range rmStatusLayouts {
		var sizes []uint32
		for _, l := range layouts {
			if !slices.Contains(sizes, l.Size) {
				sizes = append(sizes, l.Size)
			}
		}
		for _, size := range sizes {
			add(rmRequest(nr, size), layouts, size)
			if nr == EscWaitOpenComplete {
				out[len(out)-1].KeepAll = true
			}
		}
	}
	for request, layouts := range uvmStatusLayouts {
		add(request, layouts, 0)
	}
	slices.SortFunc(out, func(a, b tracer.StatusWord) int { return cmp.Compare(a.Request, b.Request) })
	return out
}
