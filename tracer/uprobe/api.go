package uprobe

import (
	"fmt"
	"sync"
	"time"

	"github.com/cudatrace/cudatrace/snapshot"
	"github.com/cudatrace/cudatrace/tracer"
)

// API is the probes on their own, for a backend that sees the syscalls by
// other means (ptrace). Its user puts the thread groups to watch in the
// filter (Trace, Untrace), attaches the libraries (AttachLibs for those
// already mapped, AttachOpened while an opener is stopped: nothing is held
// by the kernel), and reads the api events with Drain. Drain, AttachOpened
// and Close are meant for one goroutine, the one that delivers events to
// the Sink.
type API interface {
	// Trace adds a thread group to those whose returns are recorded.
	Trace(tgid int) error
	// Untrace removes one (it exited: its pid may be reused).
	Untrace(tgid int)
	// AttachLibs probes the libraries and closes their files.
	AttachLibs(libs []*snapshot.LibFile)
	// PreProbe probes a launched target's libraries in the background
	// once it has run for a while, unless the probes are closed first; it
	// closes their files.
	PreProbe(libs []*snapshot.LibFile)
	// AttachOpened probes the library that process (or thread) pid has
	// just opened as fd, named name, unless that file is probed already.
	// The opener must be stopped until it returns.
	AttachOpened(pid, fd int, name string)
	// Drain delivers the api events recorded so far, without waiting:
	// each is valid only during the call.
	Drain(deliver func(*tracer.Event))
	// Libraries lists the library files probed.
	Libraries() []string
	// Notes are what the report must say about the probes.
	Notes() []string
	// Lost counts the api events lost; non-zero means the trace is
	// incomplete.
	Lost() uint64
	// Close detaches every probe and frees the programs and maps.
	Close()
}

// Loader loads an API: the BPF object is the eBPF backend's, which
// registers its loader (Register) when it is linked in, so that a backend
// without it (ptrace) need not import it.
type Loader struct {
	// Allowed is Start's first check, cheap: the privileges, the kernel's
	// PIDs.
	Allowed func() error
	// Start loads the programs and their maps; events' Time counts from
	// start. Its errors wrap tracer.ErrUnavailable where uprobes are not
	// allowed or the kernel cannot load them.
	Start func(start time.Time) (API, error)
}

var loader struct {
	sync.Mutex
	l Loader
}

// Register makes l the loader Allowed and Start use.
func Register(l Loader) {
	loader.Lock()
	defer loader.Unlock()
	loader.l = l
}

// errNoLoader: no loader is registered (the eBPF backend is not linked in).
var errNoLoader = fmt.Errorf("%w: no uprobe loader in this build", tracer.ErrUnavailable)

func registered() Loader {
	loader.Lock()
	defer loader.Unlock()
	return loader.l
}

// Allowed is the registered loader's Allowed.
func Allowed() error {
	l := registered()
	if l.Allowed == nil {
		return errNoLoader
	}
	return l.Allowed()
}

// Start is the registered loader's Start: on error the API is nil.
func Start(start time.Time) (API, error) {
	l := registered()
	if l.Start == nil {
		return nil, errNoLoader
	}
	return l.Start(start) // the loader returns a nil interface on error
}
