package ebpf

import (
	"errors"
	"os"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf/ringbuf"

	"github.com/cudatrace/cudatrace/tracer"
	"github.com/cudatrace/cudatrace/tracer/uprobe"
)

// pollInterval bounds how long an event waits in the ring: the BPF side
// submits without waking the reader (a wake-up per event costs more than
// the event) until the ring is a quarter full or the event is an exec or
// exit.
const pollInterval = 10 * time.Millisecond

// pump moves events from the ring buffer to the sink. It blocks in the
// reader (epoll) for at most pollInterval, and ends once Flush has let it
// drain the ring.
type pump struct {
	rd    *ringbuf.Reader
	dec   *decoder
	sink  tracer.Sink
	exits chan<- struct{}
	// hold probes the library a process opened unprobed, and returns what
	// continues it (the kernel stopped a launched target there): called
	// after the open is delivered, so the sink reads the process stopped.
	hold func(uprobe.Held) (cont func())
	// before, when set, sees each event before the sink does (host-wide
	// traces: who is followed, and a process's folded counts before its
	// exit).
	before func(*tracer.Event)

	// Written by run, read after done is closed.
	events      uint64
	undecodable atomic.Uint64 // also read while it runs (live stats)
	err         error
	done        chan struct{}
}

func newPump(rd *ringbuf.Reader, dec *decoder, sink tracer.Sink, exits chan<- struct{}) *pump {
	return &pump{rd: rd, dec: dec, sink: sink, exits: exits, done: make(chan struct{})}
}

func (p *pump) run() {
	defer close(p.done)
	var rec ringbuf.Record
	draining := false
	// Set here, by the reader: ReadInto holds the reader's lock while it
	// waits, so SetDeadline from elsewhere would block. It is renewed only
	// once it has passed (not per record): a deadline already past when the
	// ring empties costs one extra look.
	p.rd.SetDeadline(time.Now().Add(pollInterval))
	for {
		err := p.rd.ReadInto(&rec)
		switch {
		case err == nil:
			p.deliver(rec.RawSample)
		case !draining && errors.Is(err, os.ErrDeadlineExceeded):
			// Quiet for pollInterval: whatever was submitted without a
			// wake-up has been read; look again.
			p.rd.SetDeadline(time.Now().Add(pollInterval))
		case errors.Is(err, ringbuf.ErrFlushed):
			// Everything committed before the flush has been read. Programs
			// that were mid-run when detached may still commit: read with a
			// deadline in the past until the ring is empty.
			draining = true
			p.rd.SetDeadline(time.Unix(0, 1))
		case draining && errors.Is(err, os.ErrDeadlineExceeded):
			return
		case errors.Is(err, os.ErrClosed):
			return
		default:
			p.err = err
			return
		}
	}
}

func (p *pump) deliver(raw []byte) {
	ev, err := p.dec.decode(raw)
	if err != nil {
		p.undecodable.Add(1) // counted with the drops: never lost silently
		return
	}
	p.events++
	if p.dec.heldOK && p.hold != nil {
		defer p.hold(p.dec.held)()
	}
	if p.before != nil {
		p.before(ev)
	}
	p.sink.Event(ev)
	if ev.Kind == tracer.KindExit {
		select {
		case p.exits <- struct{}{}:
		default:
		}
	}
}

// undecodableNow is the count so far, for a trace that is still running.
func (p *pump) undecodableNow() uint64 { return p.undecodable.Load() }
