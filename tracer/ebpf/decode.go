package ebpf

import (
	"bytes"
	"fmt"
	"time"
	"unsafe"

	"github.com/cudatrace/cudatrace/tracer"
	"github.com/cudatrace/cudatrace/tracer/uprobe"
)

// Keyed by the generated constants, so the tables follow the C enums.
var syscallNames = [...]string{
	bpfSyscallIdSC_OPENAT:       "openat",
	bpfSyscallIdSC_OPENAT2:      "openat2",
	bpfSyscallIdSC_OPEN:         "open",
	bpfSyscallIdSC_CREAT:        "creat",
	bpfSyscallIdSC_IOCTL:        "ioctl",
	bpfSyscallIdSC_MKNODAT:      "mknodat",
	bpfSyscallIdSC_MKNOD:        "mknod",
	bpfSyscallIdSC_UNLINKAT:     "unlinkat",
	bpfSyscallIdSC_UNLINK:       "unlink",
	bpfSyscallIdSC_SYMLINKAT:    "symlinkat",
	bpfSyscallIdSC_SYMLINK:      "symlink",
	bpfSyscallIdSC_MKDIRAT:      "mkdirat",
	bpfSyscallIdSC_MKDIR:        "mkdir",
	bpfSyscallIdSC_NEWFSTATAT:   "newfstatat",
	bpfSyscallIdSC_STAT:         "stat", // the kernel's newstat; strace's name
	bpfSyscallIdSC_LSTAT:        "lstat",
	bpfSyscallIdSC_STATX:        "statx",
	bpfSyscallIdSC_FACCESSAT:    "faccessat",
	bpfSyscallIdSC_FACCESSAT2:   "faccessat2",
	bpfSyscallIdSC_ACCESS:       "access",
	bpfSyscallIdSC_MEMFD_CREATE: "memfd_create",
	bpfSyscallIdSC_EXECVE:       "execve",
	bpfSyscallIdSC_EXECVEAT:     "execveat",
	bpfSyscallIdSC_EXIT:         "exit",
	bpfSyscallIdSC_MMAP:         "mmap",
	bpfSyscallIdSC_EVENTFD2:     "eventfd2",
	bpfSyscallIdSC_EVENTFD:      "eventfd",
	bpfSyscallIdSC_PIPE2:        "pipe2",
	bpfSyscallIdSC_PIPE:         "pipe",
	bpfSyscallIdSC_SOCKET:       "socket",
	bpfSyscallIdSC_SOCKETPAIR:   "socketpair",
}

var kinds = [...]tracer.Kind{
	bpfEventKindKIND_OPEN:    tracer.KindOpen,
	bpfEventKindKIND_IOCTL:   tracer.KindIoctl,
	bpfEventKindKIND_STAT:    tracer.KindStat,
	bpfEventKindKIND_ACCESS:  tracer.KindAccess,
	bpfEventKindKIND_MKNOD:   tracer.KindMknod,
	bpfEventKindKIND_UNLINK:  tracer.KindUnlink,
	bpfEventKindKIND_SYMLINK: tracer.KindSymlink,
	bpfEventKindKIND_MKDIR:   tracer.KindMkdir,
	bpfEventKindKIND_MEMFD:   tracer.KindMemfd,
	bpfEventKindKIND_EXEC:    tracer.KindExec,
	bpfEventKindKIND_EXIT:    tracer.KindExit,
	bpfEventKindKIND_API:     tracer.KindAPI,
	bpfEventKindKIND_LIMIT:   tracer.KindLimit,
}

const (
	eventSize = int(unsafe.Sizeof(bpfEvent{}))
	// Records are cut after what their kind uses (cudatrace.c): an exit
	// event is the header alone.
	eventHeaderSize = int(unsafe.Offsetof(bpfEvent{}.Arg))
	eventKindOffset = int(unsafe.Offsetof(bpfEvent{}.Kind))
	argvSlot        = int(bpfLimitsARGV_SLOT)
	maxIntern       = 4096
)

// eventBox holds an event and the parts it points to. The decoder reuses
// one for every event: a Sink copies what it keeps.
type eventBox struct {
	ev     tracer.Event
	dev    tracer.Dev
	arg    [len(bpfEvent{}.Arg)]byte
	out    int64
	status tracer.ParamWord
	limits tracer.Limits
}

// decoder turns ring-buffer samples into tracer.Events. Comms and paths
// repeat (the same few nodes, opened again and again), so their strings are
// interned rather than allocated per event, and the last of each is checked
// before the intern table.
type decoder struct {
	startKtime uint64
	seq        uint64
	strs       map[string]string
	lastComm   string
	lastPath   string
	box        eventBox
	full       bpfEvent // a cut record, zero-filled to full size
	// api names the probes behind api events (nil: none attached).
	api *uprobe.Probes
	// held is the last event's hold, when the kernel stopped its process
	// at the open of an unprobed library (heldOK).
	held   uprobe.Held
	heldOK bool
}

func newDecoder(startKtime uint64) *decoder {
	return &decoder{startKtime: startKtime, strs: make(map[string]string)}
}

// decode converts one sample. The event is valid until the next call; the
// sample buffer may be reused as soon as it returns.
func (d *decoder) decode(raw []byte) (*tracer.Event, error) {
	if len(raw) > eventSize && bpfEventKind(raw[eventKindOffset]) == bpfEventKindKIND_ENV {
		d.heldOK = false
		return d.decodeEnv(raw)
	}
	if len(raw) < eventHeaderSize || len(raw) > eventSize {
		return nil, fmt.Errorf("event of %d bytes, want %d to %d", len(raw), eventHeaderSize, eventSize)
	}
	// Ring-buffer samples are 8-byte aligned, as is the struct. A cut
	// record is copied out first: a pointer to the struct must not reach
	// past the sample (checkptr, -race, rejects it).
	var e *bpfEvent
	if len(raw) == eventSize {
		e = (*bpfEvent)(unsafe.Pointer(&raw[0]))
	} else {
		full := unsafe.Slice((*byte)(unsafe.Pointer(&d.full)), eventSize)
		clear(full[copy(full, raw):])
		e = &d.full
	}
	d.heldOK = false
	if bpfEventKind(e.Kind) == bpfEventKindKIND_API {
		return d.decodeAPI(e)
	}
	if int(e.Kind) >= len(kinds) || kinds[e.Kind] == "" || int(e.Syscall) >= len(syscallNames) || syscallNames[e.Syscall] == "" {
		return nil, fmt.Errorf("unknown event kind %d / syscall %d", e.Kind, e.Syscall)
	}
	box := &d.box
	ev := d.begin(e, kinds[e.Kind])
	ev.Syscall = syscallNames[e.Syscall]
	ev.Ret = e.Ret
	if ev.Kind == tracer.KindLimit {
		return ev, nil // the call and its result are all it has
	}
	if ev.Kind == tracer.KindExit {
		// The wait status the kernel keeps: code<<8, or the signal.
		ev.ExitCode = int(e.ExitCode>>8) & 0xff
		ev.Signal = int(e.ExitCode & 0x7f)
		return ev, nil
	}
	ev.Path = d.internLast(cstr(e.Path[:]), &d.lastPath)
	ev.Flags = e.Flags
	ev.Mode = e.Mode
	killed := e.NoEntry == uint8(bpfNoEntryMarkNO_ENTRY_THREAD_KILLED)
	ev.NoEntry = e.NoEntry == uint8(bpfNoEntryMarkNO_ENTRY_REFUSED) || e.NoEntry == uint8(bpfNoEntryMarkNO_ENTRY_ROLLED_BACK) || killed
	// Rolled back for SIGSYS, or its thread ended in it: the kernel sent
	// neither a result nor the params (the program sends ret 0 and no arg).
	ev.NoReturn = e.NoEntry == uint8(bpfNoEntryMarkNO_ENTRY_ROLLED_BACK) || killed
	ev.ThreadKilled = killed
	if e.Held != 0 && ev.Kind == tracer.KindOpen {
		d.held = uprobe.Held{PID: ev.PID, FD: int(e.Ret), Path: ev.Path, Dev: e.Request, Ino: e.Uptr, Stopped: e.Held == 1}
		d.heldOK = true
		ev.Unprobed = e.Held == 2
	}
	if e.HasDev != 0 {
		box.dev = tracer.Dev{Major: e.DevMajor, Minor: e.DevMinor}
		ev.Dev = &box.dev
	}
	switch ev.Kind {
	case tracer.KindIoctl:
		ev.FD = int(e.Fd)
		ev.Request = e.Request
		if n := int(e.ArgLen); n > 0 && n <= len(box.arg) {
			copy(box.arg[:], e.Arg[:n])
			ev.Arg = box.arg[:n:n]
		}
		if e.HasStatus != 0 {
			box.status = tracer.ParamWord{Off: uint32(e.StatusOff), Value: e.Status}
			ev.Status = &box.status
		}
	case tracer.KindSymlink:
		ev.Target = string(cstr(e.Aux[:]))
	case tracer.KindExec:
		n := min(int(e.Argc), len(e.Aux)/argvSlot)
		if n > 0 {
			ev.Argv = make([]string, n)
			for i := range n {
				ev.Argv[i] = d.intern(cstr(e.Aux[i*argvSlot : (i+1)*argvSlot]))
			}
		}
	}
	return ev, nil
}

// begin fills the reused event with what every record has: the next Seq,
// the time since the trace started, who made the call.
func (d *decoder) begin(e *bpfEvent, kind tracer.Kind) *tracer.Event {
	d.box.ev = tracer.Event{}
	ev := &d.box.ev
	d.seq++
	ev.Seq = d.seq
	if e.Ktime > d.startKtime {
		ev.Time = time.Duration(e.Ktime - d.startKtime)
	}
	ev.PID = int(e.Tgid)
	ev.TID = int(e.Tid)
	ev.CgroupID = e.CgroupId
	ev.Comm = d.internLast(cstr(e.Comm[:]), &d.lastComm)
	ev.Kind = kind
	return ev
}

// decodeEnv converts a failing entry point's copy of its process's
// environment (send_env): the event's header, then the block, its length
// in ret (0: it could not be read), cut when mode says so. It takes no
// sequence number: the pipeline never records it.
func (d *decoder) decodeEnv(raw []byte) (*tracer.Event, error) {
	var h bpfEvent
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&h)), eventHeaderSize), raw[:eventHeaderSize])
	n := h.Ret
	if n < 0 || n > int64(len(raw)-eventHeaderSize) {
		return nil, fmt.Errorf("environment record of %d bytes says %d", len(raw), n)
	}
	d.box.ev = tracer.Event{PID: int(h.Tgid), TID: int(h.Tid), Kind: tracer.KindEnv, Env: raw[eventHeaderSize : eventHeaderSize+int(n)]}
	ev := &d.box.ev
	if h.Ktime > d.startKtime {
		ev.Time = time.Duration(h.Ktime - d.startKtime)
	}
	if h.Mode != 0 {
		ev.Flags = tracer.EnvCut
	}
	return ev, nil
}

// decodeAPI converts a uretprobe's record: which entry point returned
// what, in which library.
func (d *decoder) decodeAPI(e *bpfEvent) (*tracer.Event, error) {
	if d.api == nil {
		return nil, fmt.Errorf("api event with no probes attached")
	}
	fn, lib, ok := d.api.Describe(e.Request)
	if !ok {
		return nil, fmt.Errorf("api event with unknown cookie %#x", e.Request)
	}
	box := &d.box
	ev := d.begin(e, tracer.KindAPI)
	ev.Func = fn
	ev.Path = lib
	ev.Ret = e.Ret
	if e.HasCount != 0 {
		box.out = int64(int32(uint32(e.Flags)))
		ev.Out = &box.out
	}
	if int(e.ArgLen) == int(unsafe.Sizeof(bpfApiLimits{})) {
		l := (*bpfApiLimits)(unsafe.Pointer(&e.Arg[0]))
		box.limits = tracer.Limits{AS: [2]uint64{l.AsCur, l.AsMax}, NoFile: [2]uint64{l.NofileCur, l.NofileMax}, MemLock: [2]uint64{l.MemlockCur, l.MemlockMax}}
		ev.Limits = &box.limits
	}
	return ev, nil
}

// cstr views a NUL-terminated C char array as bytes, without copying.
func cstr(a []int8) []byte {
	b := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(a))), len(a))
	if i := bytes.IndexByte(b, 0); i >= 0 {
		return b[:i]
	}
	return b
}

// internLast is intern with a one-entry cache in front: a loop on one
// device repeats the same comm and path event after event.
func (d *decoder) internLast(b []byte, last *string) string {
	if string(b) == *last { // no allocation for the comparison
		return *last
	}
	*last = d.intern(b)
	return *last
}

func (d *decoder) intern(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	if s, ok := d.strs[string(b)]; ok { // no allocation for the lookup
		return s
	}
	s := string(b)
	if len(d.strs) < maxIntern {
		d.strs[s] = s
	}
	return s
}
