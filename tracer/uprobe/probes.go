// Package uprobe is the uprobes on the CUDA driver and NVML entry points,
// shared by the eBPF and ptrace backends: which functions, how a library
// file is probed (per symbol, or one uprobe_multi link per library), the
// kernel-held opens released once probed, and the interface a backend
// without the BPF object (ptrace) loads them through.
package uprobe

import (
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"structs"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/cudatrace/cudatrace/snapshot"
)

// The CUDA driver and NVML entry points whose return codes say whether, and
// how, CUDA failed: the verdict the syscalls are then explained against.
// countOut marks those returning a count through their first argument. A
// library is probed on those it exports, whatever its file is called (a
// symlink of another name, a shim).
type apiFunc struct {
	name     string
	countOut bool
}

var apiFuncs = []apiFunc{
	{"cuInit", false},
	{"cuDeviceGetCount", true},
	{"cuDevicePrimaryCtxRetain", false},
	{"cuCtxCreate_v2", false},
	{"cuCtxCreate_v3", false},
	{"cuCtxCreate_v4", false},
	{"nvmlInit_v2", false},
	{"nvmlInitWithFlags", false},
	{"nvmlInit", false},
}

// The attach cookie names the probe: library index << 16 | apiFuncs index.
func apiCookie(lib, fn int) uint64 { return uint64(lib)<<16 | uint64(fn) }

// Probes are the uprobes on the CUDA and NVML libraries of one trace.
// Attaching happens before the target is released, from the pump (a held
// open), and at the end nothing is left: Close detaches all.
type Probes struct {
	enter, ret *ebpf.Program
	// enterMulti, retMulti attach a library's entry points with one
	// uprobe_multi link each (nil before 6.6, or where not loaded).
	enterMulti, retMulti *ebpf.Program
	probed               *ebpf.Map // probed_libs: the files the kernel need not hold for
	// retFor, where the kernel has no attach cookies (before 5.15), is
	// the return program for one cookie; its programs are retProgs.
	retFor   func(cookie uint64) (*ebpf.Program, error)
	retProgs []*ebpf.Program

	mu       sync.Mutex
	libs     []string           // by cookie index: the path the target used
	attached map[[2]uint64]bool // files probed, by (st_dev, st_ino)
	links    []link.Link
	notes    []string
	closed   bool // close ran: nothing more is attached

	// awaited (awaited_libs) and awaiting (awaiting_libs): the files
	// preProbe will probe, whose opens by any name the kernel holds until
	// then (nil: not launching, or ptrace).
	awaited  *ebpf.Map
	awaiting *ebpf.Variable

	background sync.WaitGroup // preProbe's goroutine
	closing    chan struct{}  // closed by close: preProbe stops waiting
	// preProbed says, for --debug, how the background probing ended.
	preProbed string
}

// Objects are the loaded programs and maps the probes use, from the
// caller's BPF collection (the object is the eBPF backend's: it is built
// from one C file with the syscall programs, whose maps these share).
type Objects struct {
	Enter, Ret *ebpf.Program
	// EnterMulti, RetMulti: the uprobe_multi twins (nil before 6.6, or
	// where not loaded).
	EnterMulti, RetMulti *ebpf.Program
	Probed               *ebpf.Map // probed_libs
	// RetFor, where the kernel has no attach cookies (bpf_get_attach_cookie,
	// 5.15), loads the return program of one entry point, the cookie its
	// constant; then Ret is nil. The probes close what it loads.
	RetFor func(cookie uint64) (*ebpf.Program, error)
	// Awaited (awaited_libs) and Awaiting (awaiting_libs), for PreProbe's
	// hold of opens by any name (nil: not launching, or ptrace).
	Awaited  *ebpf.Map
	Awaiting *ebpf.Variable
}

// New makes the probes of one trace; nothing is attached yet.
func New(o Objects) *Probes {
	return &Probes{enter: o.Enter, ret: o.Ret, enterMulti: o.EnterMulti, retMulti: o.RetMulti, probed: o.Probed,
		retFor: o.RetFor, awaited: o.Awaited, awaiting: o.Awaiting, attached: map[[2]uint64]bool{}}
}

// describe names a returned probe for the decoder.
func (p *Probes) Describe(cookie uint32) (fn, lib string, ok bool) {
	li, fi := int(cookie>>16), int(cookie&0xffff)
	p.mu.Lock()
	defer p.mu.Unlock()
	if li >= len(p.libs) || fi >= len(apiFuncs) {
		return "", "", false
	}
	return apiFuncs[fi].name, p.libs[li], true
}

// attachLibs probes each file and closes it.
func (p *Probes) AttachLibs(libs []*snapshot.LibFile) {
	for _, l := range libs {
		if err := p.attachFile(l.File, l.Path, nil); err != nil {
			p.note("uprobes on %s: %v", l.Path, err)
		}
		_ = l.Close() // best-effort cleanup: nothing to do if it fails
	}
}

// errNotWanted: the background probing found nobody left to probe for.
var errNotWanted = errors.New("no traced process left")

// preProbeAfter is how long a launched target runs before its libraries
// are probed: one gone by then (a short command) costs no uprobe. On the
// H200 a uprobe link took ~20 ms to make (a grace period) and ~95 ms to
// close (an RCU tasks-trace grace period), so a 2 ms target paid 115 ms.
const preProbeAfter = 25 * time.Millisecond

// preProbe probes the libraries a launched target's loader would pick,
// in the background once it has run for preProbeAfter: off its start-up,
// and not at all for a target gone by then or before the links are made.
// Called before the target is released: an open that comes first, by any
// name, is held by the kernel until its library is probed
// (hold_unprobed_libs, await), so no return is missed either way. wanted
// says whether anyone is left to probe for.
func (p *Probes) PreProbe(libs []*snapshot.LibFile, wanted func() bool) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		snapshot.CloseAll(libs)
		return
	}
	if p.closing == nil {
		p.closing = make(chan struct{})
	}
	closing := p.closing
	p.mu.Unlock()
	p.await(libs)
	p.background.Go(func() {
		start := time.Now()
		wait := time.NewTimer(preProbeAfter)
		defer wait.Stop()
		ended := false
		select {
		case <-wait.C:
		case <-closing:
			ended = true
		}
		probed := 0
		for _, l := range libs {
			err := p.attachFile(l.File, l.Path, wanted)
			switch {
			case err == nil:
				probed++
			case !errors.Is(err, errNotWanted):
				p.note("uprobes on %s: %v", l.Path, err)
			}
			_ = l.Close() // best-effort cleanup: nothing to do if it fails
		}
		p.awaitDone()
		p.mu.Lock()
		defer p.mu.Unlock()
		took := time.Since(start).Round(100 * time.Microsecond)
		if ended {
			p.preProbed = fmt.Sprintf("none of %d libraries probed in the background: the trace ended first, after %v", len(libs), took)
		} else {
			p.preProbed = fmt.Sprintf("%d of %d libraries probed in the background, done %v after the target started", probed, len(libs), took)
		}
	})
}

// await tells the kernel which files preProbe will probe, before the
// target runs: an open of one under another name than libcuda's or NVML's
// (a symlink) is held as theirs are. Best effort: a file not awaited is
// still held when opened by its own name.
func (p *Probes) await(libs []*snapshot.LibFile) {
	if p.awaited == nil || p.awaiting == nil {
		return
	}
	n := 0
	for _, l := range libs {
		var st unix.Stat_t
		if unix.Fstat(int(l.File.Fd()), &st) == nil && p.awaited.Put(libKey(&st), uint8(1)) == nil {
			n++
		}
	}
	if n > 0 {
		_ = p.awaiting.Set(uint32(n)) // on failure the by-name hold still applies
	}
}

// awaitDone ends await once the background probing is over.
func (p *Probes) awaitDone() {
	if p.awaited == nil || p.awaiting == nil {
		return
	}
	_ = p.awaiting.Set(uint32(0)) // the map is emptied next; a stale entry only holds an open
	var key libID
	for p.awaited.NextKey(nil, &key) == nil {
		if p.awaited.Delete(key) != nil {
			break
		}
	}
}

// libID is probed_libs' and awaited_libs' key (struct lib_id in
// cudatrace.c, bpfLibId in the eBPF backend's generated code).
type libID struct {
	_   structs.HostLayout
	Ino uint64
	Dev uint32
	Pad uint32
}

// libKey is a file as the kernel names it: its superblock's dev_t and inode.
func libKey(st *unix.Stat_t) libID {
	return libID{Ino: st.Ino, Dev: uint32(unix.Major(st.Dev))<<20 | uint32(unix.Minor(st.Dev))}
}

// attachFile puts the entry points' probes on an opened library file
// (through /proc/self/fd, so exactly this file), once per file. With
// wanted, it makes no link once wanted says no (errNotWanted).
func (p *Probes) attachFile(f *os.File, name string, wanted func() bool) error {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return err
	}
	id := [2]uint64{st.Dev, st.Ino}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		if wanted != nil {
			return errNotWanted // the background probing, ended
		}
		return nil
	}
	if p.attached[id] {
		return nil
	}
	if wanted != nil && !wanted() {
		return errNotWanted
	}
	ex, err := link.OpenExecutable(fmt.Sprintf("/proc/self/fd/%d", f.Fd()))
	if err != nil {
		return err
	}
	li := len(p.libs)
	found, err := p.attachMulti(ex, f, li, wanted)
	if errors.Is(err, errNotWanted) {
		return err
	}
	if err != nil {
		found = 0 // per symbol, below
	}
	for fi, fn := range apiFuncs {
		if err == nil {
			break // attached as one link per library (or nothing to attach)
		}
		l, err := p.uretprobe(ex, fn.name, apiCookie(li, fi))
		if errors.Is(err, link.ErrNoSymbol) {
			continue
		}
		if err != nil {
			return fmt.Errorf("uretprobe %s: %w", fn.name, err)
		}
		p.links = append(p.links, l)
		found++
		if fn.countOut {
			if l, err := ex.Uprobe(fn.name, p.enter, nil); err == nil {
				p.links = append(p.links, l)
			}
		}
	}
	p.attached[id] = true
	p.libs = append(p.libs, name)
	if found == 0 {
		p.notes = append(p.notes, fmt.Sprintf("%s exports none of the CUDA/NVML entry points cudatrace probes", name))
	}
	return p.probed.Put(libKey(&st), uint8(1))
}

// uretprobe attaches the return probe of one entry point: the program with
// its cookie, or where the kernel has no cookies a program of its own
// (retFor), kept until Close.
func (p *Probes) uretprobe(ex *link.Executable, symbol string, cookie uint64) (link.Link, error) {
	if p.retFor == nil {
		return ex.Uretprobe(symbol, p.ret, &link.UprobeOptions{Cookie: cookie})
	}
	prog, err := p.retFor(cookie)
	if err != nil {
		return nil, err
	}
	l, err := ex.Uretprobe(symbol, prog, nil)
	if err != nil {
		_ = prog.Close() // not attached: nothing holds it
		return nil, err
	}
	p.retProgs = append(p.retProgs, prog)
	return l, nil
}

// attachMulti attaches the library's exported entry points with one
// uretprobe_multi link (and one uprobe_multi for those with a count out),
// returning how many it probes; an error leaves nothing attached.
func (p *Probes) attachMulti(ex *link.Executable, f *os.File, li int, wanted func() bool) (int, error) {
	if p.enterMulti == nil || p.retMulti == nil {
		return 0, errors.New("uprobe_multi not available")
	}
	exported, err := exportedFuncs(f)
	if err != nil {
		return 0, err
	}
	if wanted != nil && !wanted() {
		return 0, errNotWanted // the target may have ended while the symbols were read
	}
	var rets, enters, retCookies []uint64
	for fi, fn := range apiFuncs {
		off, ok := exported[fn.name]
		if !ok {
			continue
		}
		rets = append(rets, off)
		retCookies = append(retCookies, apiCookie(li, fi))
		if fn.countOut {
			enters = append(enters, off)
		}
	}
	if len(rets) == 0 {
		return 0, nil
	}
	// By offset: the library's symbols are not read a second time.
	rl, err := ex.UretprobeMulti(nil, p.retMulti, &link.UprobeMultiOptions{Addresses: rets, Cookies: retCookies})
	if err != nil {
		return 0, err
	}
	if len(enters) > 0 {
		el, err := ex.UprobeMulti(nil, p.enterMulti, &link.UprobeMultiOptions{Addresses: enters})
		if err != nil {
			_ = rl.Close() // best-effort cleanup: nothing to do if it fails
			return 0, err
		}
		p.links = append(p.links, el)
	}
	p.links = append(p.links, rl)
	return len(rets), nil
}

// maxSymbolBytes bounds the symbol and string tables read from a library
// (libcuda's are well under 1 MiB): the file is the target's to make.
const maxSymbolBytes = 32 << 20

// exportedFuncs are the entry points of apiFuncs a shared library exports
// (.dynsym), at the file offsets a uprobe takes: the symbol's address less
// its executable segment's address, plus that segment's file offset. The
// library may be hostile: debug/elf is not hardened against crafted files,
// so its panics are errors here, and oversized tables are refused.
func exportedFuncs(f *os.File) (out map[string]uint64, err error) {
	defer func() {
		if r := recover(); r != nil {
			out, err = nil, fmt.Errorf("malformed ELF file: %v", r)
		}
	}()
	ef, err := elf.NewFile(f)
	if err != nil {
		return nil, err
	}
	for _, sec := range ef.Sections {
		if (sec.Type == elf.SHT_DYNSYM || sec.Type == elf.SHT_STRTAB) && sec.Size > maxSymbolBytes {
			return nil, fmt.Errorf("section %s is %d bytes, more than a library's symbols take", sec.Name, sec.Size)
		}
	}
	syms, err := ef.DynamicSymbols()
	if err != nil {
		return nil, err
	}
	probed := make(map[string]bool, len(apiFuncs))
	for _, fn := range apiFuncs {
		probed[fn.name] = true
	}
	out = make(map[string]uint64, len(apiFuncs))
	for _, s := range syms {
		if s.Section == elf.SHN_UNDEF || elf.ST_TYPE(s.Info) != elf.STT_FUNC || !probed[s.Name] {
			continue
		}
		for _, seg := range ef.Progs {
			if seg.Type == elf.PT_LOAD && seg.Flags&elf.PF_X != 0 && seg.Vaddr <= s.Value && s.Value < seg.Vaddr+seg.Memsz {
				out[s.Name] = s.Value - seg.Vaddr + seg.Off
				break
			}
		}
	}
	return out, nil
}

// markProbed records a file as the kernel identified it in a held open, so
// later opens of it are not held again.
func (p *Probes) markProbed(dev uint32, ino uint64) {
	_ = p.probed.Put(libID{Ino: ino, Dev: dev}, uint8(1)) // on failure the next open is held again: slower, not wrong
}

// Release probes the library a process opened unprobed, and returns what
// continues the process the kernel stopped there (nothing, where it was not
// stopped). The caller delivers the open in between: what is read of the
// process then (its environment, its cgroups) is read while it waits.
func (p *Probes) Release(h Held) (cont func()) {
	if !h.Stopped {
		p.attachUnstopped(h)
		return func() {}
	}
	p.AttachOpened(h.PID, h.FD, h.Path)
	p.markProbed(h.Dev, h.Ino)
	return func() {
		// Gone already (ESRCH) is fine; a live process left stopped is not.
		if err := unix.Kill(h.PID, unix.SIGCONT); err != nil && err != unix.ESRCH {
			p.note("could not continue PID %d after probing %s: %v; it stays stopped (kill -CONT %d)", h.PID, h.Path, err, h.PID)
		}
	}
}

// attachOpened probes the library a process just opened, as its fd fd
// (in /proc/PID/fd: a thread id works too), if it is a regular file.
func (p *Probes) AttachOpened(pid, fd int, name string) {
	// Looked up O_PATH and opened only if regular: the target may have
	// opened a device under a library's name.
	f, err := snapshot.OpenRegular(fmt.Sprintf("/proc/%d/fd/%d", pid, fd))
	if err != nil {
		p.note("uprobes on %s (opened by PID %d): %v", name, pid, err)
		return
	}
	defer func() { _ = f.Close() }() // read-only: a failed close loses nothing
	if err := p.attachFile(f, name, nil); err != nil {
		p.note("uprobes on %s: %v", name, err)
	}
}

// attachUnstopped probes the file of a host-wide trace's open of an
// unprobed library. Nobody waits for it, so the fd may be closed (the
// loader closes it once mapped) or even reused by then: the file is taken
// from the fd or the process's mappings only if it is the inode the kernel
// named.
func (p *Probes) attachUnstopped(h Held) {
	same := func(f *os.File) bool {
		var st unix.Stat_t
		return unix.Fstat(int(f.Fd()), &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG && st.Ino == h.Ino &&
			uint32(unix.Major(st.Dev))<<20|uint32(unix.Minor(st.Dev)) == h.Dev
	}
	attached := false
	if f, err := snapshot.OpenRegular(fmt.Sprintf("/proc/%d/fd/%d", h.PID, h.FD)); err == nil {
		if same(f) {
			attached = true
			if err := p.attachFile(f, h.Path, nil); err != nil {
				p.note("uprobes on %s: %v", h.Path, err)
			}
		}
		_ = f.Close() // read-only: a failed close loses nothing
	}
	for _, l := range snapshot.OpenMappedLibraries(h.PID) {
		if !attached && same(l.File) {
			attached = true
			if err := p.attachFile(l.File, h.Path, nil); err != nil {
				p.note("uprobes on %s: %v", h.Path, err)
			}
		}
		_ = l.Close() // best-effort cleanup: nothing to do if it fails
	}
	if !attached {
		// Not marked probed: the next open of it tries again.
		p.note("uprobes on %s (opened by PID %d): the file was closed and unmapped before it could be probed", h.Path, h.PID)
		return
	}
	p.markProbed(h.Dev, h.Ino)
}

func (p *Probes) note(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.notes) < 8 {
		p.notes = append(p.notes, fmt.Sprintf(format, args...))
	}
}

// probedLibs lists the libraries probed, for the report.
func (p *Probes) Libraries() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.libs...)
}

// close detaches every probe, in parallel: each uprobe's unregistration
// waits for its own grace period (~40 ms here), which one after another
// made a run with both libraries probed take ~400 ms longer to exit.
func (p *Probes) Close() {
	p.mu.Lock()
	p.closed = true // after a background attach in flight, which holds mu
	if p.closing != nil {
		close(p.closing)
		p.closing = nil
	}
	links := p.links
	p.links = nil
	p.mu.Unlock()
	p.background.Wait() // its files closed
	var wg sync.WaitGroup
	for _, l := range links {
		wg.Go(func() { _ = l.Close() }) // best-effort cleanup: nothing to do if it fails
	}
	wg.Wait()
	p.mu.Lock()
	progs := p.retProgs
	p.retProgs = nil
	p.mu.Unlock()
	for _, prog := range progs {
		_ = prog.Close() // best-effort cleanup: nothing to do if it fails
	}
}

// Held is an open of an unprobed library whose process the kernel
// stopped (Stopped) or, host-wide, only reported: FD is the open's result
// in process PID, Dev and Ino the file as the kernel names it.
type Held struct {
	PID, FD int
	Path    string
	Dev     uint32
	Ino     uint64
	Stopped bool // the kernel sent it SIGSTOP: SIGCONT it once probed
}

// TargetLibraryPath is a running process's LD_LIBRARY_PATH, read through
// the snapshot's guarded reader ("" when unreadable).
func TargetLibraryPath(pid int) string {
	env, err := snapshot.TargetEnv(pid)
	if err != nil {
		return ""
	}
	return env["LD_LIBRARY_PATH"]
}

// Notes are what the report must say about the probes (a library that
// could not be probed, one with none of the entry points).
func (p *Probes) Notes() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.notes...)
}

// PreProbed says, for --debug, how PreProbe's background probing ended
// ("" when there was none, or it has not ended).
func (p *Probes) PreProbed() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.preProbed
}

// Wait waits for PreProbe's background probing to end (its tests).
func (p *Probes) Wait() { p.background.Wait() }

// Links counts the links attached (its tests).
func (p *Probes) Links() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.links)
}
