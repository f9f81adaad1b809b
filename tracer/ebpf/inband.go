package ebpf

import (
	"fmt"
	"math"

	"github.com/cilium/ebpf"

	"github.com/cudatrace/cudatrace/tracer"
)

// setInbandStatus fills the programs' table of in-band result words
// (tracer.Spec.InbandStatus) before they attach.
func setInbandStatus(m *ebpf.Map, words []tracer.StatusWord) error {
	if len(words) > int(m.MaxEntries()) {
		return fmt.Errorf("too many in-band status words: %d (at most %d)", len(words), m.MaxEntries())
	}
	for _, w := range words {
		if w.Off > math.MaxUint16 { // the event's status_off
			return fmt.Errorf("in-band status of ioctl %#x at offset %d: at most %d", w.Request, w.Off, math.MaxUint16)
		}
		v := bpfInbandWord{Off: w.Off}
		if w.KeepAll {
			v.KeepAll = 1
		}
		if err := m.Put(w.Request, &v); err != nil {
			return fmt.Errorf("set in-band status of ioctl %#x: %w", w.Request, err)
		}
	}
	return nil
}
