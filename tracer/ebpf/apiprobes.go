package ebpf

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/cudatrace/cudatrace/snapshot"
	"github.com/cudatrace/cudatrace/tracer"
	"github.com/cudatrace/cudatrace/tracer/uprobe"
)

// The ptrace backend loads the probes through package uprobe, which does
// not import this one.
func init() {
	uprobe.Register(uprobe.Loader{Allowed: APIProbesAllowed, Start: func(start time.Time) (uprobe.API, error) {
		p, err := StartAPIProbes(start)
		if err != nil {
			return nil, err // not a typed nil
		}
		return p, nil
	}})
}

// apiRingBytes is the API probes' own ring: api events, a few hundred bytes
// each, and one environment copy (64 KiB at most) per failing process
// image, read at every stop of the tracer that drains it.
const apiRingBytes = 1 << 20

// apiObjects are what the entry points' probes need, and nothing else:
// LoadAndAssign loads these (and what they reference: api_out_arg, the
// read-only data), not the syscall programs.
type apiObjects struct {
	Enter  *ebpf.Program `ebpf:"ct_api_enter"`
	Ret    *ebpf.Program `ebpf:"ct_api_ret"`
	Events *ebpf.Map     `ebpf:"events"`
	Traced *ebpf.Map     `ebpf:"traced"`
	Probed *ebpf.Map     `ebpf:"probed_libs"`
	Drops  *ebpf.Map     `ebpf:"drops"`
}

// apiMultiObjects adds the uprobe_multi twins (6.6+): one link per
// library, so one grace period per library at the close, where a link per
// symbol made a `-- /bin/true` on the H200 take 1.1 s.
type apiMultiObjects struct {
	apiObjects
	EnterMulti *ebpf.Program `ebpf:"ct_api_enter_multi"`
	RetMulti   *ebpf.Program `ebpf:"ct_api_ret_multi"`
}

func (o *apiMultiObjects) close() {
	_ = o.EnterMulti.Close() // best-effort cleanup: nothing to do if it fails
	_ = o.RetMulti.Close()   // best-effort cleanup: nothing to do if it fails
	o.apiObjects.close()
}

func (o *apiObjects) close() {
	// Close is a no-op on nil: what a failed load left unset.
	_ = o.Enter.Close() // best-effort cleanup: nothing to do if it fails
	_ = o.Ret.Close()   // best-effort cleanup: nothing to do if it fails
	for _, m := range []*ebpf.Map{o.Events, o.Traced, o.Probed, o.Drops} {
		_ = m.Close() // best-effort cleanup: nothing to do if it fails
	}
}

// APIProbes are the uretprobes on the CUDA and NVML entry points alone, for
// a backend that sees the syscalls by other means (ptrace): uprobe.API,
// loaded from this package's BPF object.
type APIProbes struct {
	objs apiMultiObjects // the multi programs nil before 6.6
	// rest, with the object for older kernels, holds the other maps the
	// return programs (one per entry point: retCopies) use.
	rest   *ebpf.Collection
	probes *uprobe.Probes
	rd     *ringbuf.Reader
	dec    *decoder
	rec    ringbuf.Record

	undecodable uint64
	readErr     error
}

// StartAPIProbes loads the entry points' programs and their maps. Events'
// Time counts from start. It fails with an error wrapping
// tracer.ErrUnavailable where uprobes are not allowed (no root or
// CAP_BPF+CAP_PERFMON, lockdown) or the kernel cannot load them.
func StartAPIProbes(start time.Time) (*APIProbes, error) {
	if err := APIProbesAllowed(); err != nil {
		return nil, err
	}
	v := kernelSupport()
	if v.missing != nil {
		return nil, v.missing
	}
	spec, err := loadObject(v)
	if err != nil {
		return nil, fmt.Errorf("read embedded BPF object: %w", err)
	}
	spec.Maps[bpfMapEvents].MaxEntries = apiRingBytes
	p := &APIProbes{}
	var to any = &p.objs
	progs := []*ebpf.ProgramSpec{spec.Programs[bpfProgCtApiEnter], spec.Programs[bpfProgCtApiRet]}
	if v.uprobeMulti {
		progs = append(progs, spec.Programs[bpfProgCtApiEnterMulti], spec.Programs[bpfProgCtApiRetMulti])
	} else {
		to = &p.objs.apiObjects // per-symbol links remain
	}
	opts, cacheKey, err := apiLoadOptions()
	if err != nil {
		return nil, unavailable("BPF not supported: no kernel BTF: %v", err)
	}
	var retFor func(uint64) (*ebpf.Program, error)
	if v.oldKernel != "" {
		if retFor, err = p.loadOldKernel(spec, opts); err != nil {
			return nil, loadError(err, false)
		}
	} else if err := spec.LoadAndAssign(to, &opts); err != nil {
		return nil, loadError(err, false)
	}
	if cacheKey != "" {
		// Parsed in full this time: cache what the programs took of it.
		if raw, err := reduced(opts.Programs.KernelTypes, spec.Types, progs); err == nil {
			_ = writeCoreTypes(raw, cacheKey) // a failure costs the next run a parse
		}
	}
	if onLoadAPI != nil {
		onLoadAPI(p.objs.Enter, p.objs.Ret)
	}
	if p.rd, err = ringbuf.NewReader(p.objs.Events); err != nil {
		p.closeObjs()
		return nil, fmt.Errorf("open ring buffer: %w", err)
	}
	p.probes = uprobe.New(uprobe.Objects{Enter: p.objs.Enter, Ret: p.objs.Ret, EnterMulti: p.objs.EnterMulti, RetMulti: p.objs.RetMulti,
		RetFor: retFor, Probed: p.objs.Probed})
	startKtime := monotonicNow()
	if since := time.Since(start); since > 0 && uint64(since) < startKtime {
		startKtime -= uint64(since)
	}
	p.dec = newDecoder(startKtime)
	p.dec.api = p.probes
	return p, nil
}

// loadOldKernel loads, from the object for older kernels, the entry
// program and every map the return programs use; those load one per entry
// point as they are probed (the function returned).
func (p *APIProbes) loadOldKernel(spec *ebpf.CollectionSpec, opts ebpf.CollectionOptions) (func(uint64) (*ebpf.Program, error), error) {
	part, _ := groupSpec(spec, []string{bpfProgCtApiEnter, bpfProgCtApiRet}, nil)
	delete(part.Programs, bpfProgCtApiRet)
	for _, name := range []string{bpfMapEvents, bpfMapTraced, bpfMapProbedLibs, bpfMapDrops} {
		part.Maps[name] = spec.Maps[name] // apiObjects' maps, used by the programs or not
	}
	coll, err := ebpf.NewCollectionWithOptions(part, opts)
	if err != nil {
		return nil, err
	}
	made := maps.Clone(coll.Maps)
	p.objs.Enter = coll.DetachProgram(bpfProgCtApiEnter)
	p.objs.Events = coll.DetachMap(bpfMapEvents)
	p.objs.Traced = coll.DetachMap(bpfMapTraced)
	p.objs.Probed = coll.DetachMap(bpfMapProbedLibs)
	p.objs.Drops = coll.DetachMap(bpfMapDrops)
	p.rest = coll
	return retCopies(spec, spec.Programs[bpfProgCtApiRet], made, opts), nil
}

// apiLoadOptions are the uprobe programs' load options: the kernel types
// cached for this kernel (coretypes.go), or else the kernel's BTF parsed in
// full, with the key to cache them under ("" when not to).
func apiLoadOptions() (ebpf.CollectionOptions, string, error) {
	key, err := coreTypesKey()
	if err == nil {
		if kt, err := readCoreTypes(key); err == nil {
			return ebpf.CollectionOptions{Programs: ebpf.ProgramOptions{KernelTypes: kt}}, "", nil
		}
	}
	opts, lerr := loadOptions(kernelBTF())
	if err != nil {
		key = ""
	}
	return opts, key, lerr
}

// APIProbesAllowed is StartAPIProbes' first check, cheap: the privileges,
// and the kernel's PIDs.
func APIProbesAllowed() error {
	if err := checkPrivileges(); err != nil {
		return err
	}
	if !inInitialPIDNamespace() {
		// The programs see the kernel's PIDs; the caller knows its own.
		return unavailable("cudatrace runs in a PID namespace of its own, whose PIDs the uprobes cannot match")
	}
	return nil
}

// inInitialPIDNamespace: /proc/self/ns/pid is the initial namespace's
// inode (PROC_PID_INIT_INO, fixed by the kernel).
func inInitialPIDNamespace() bool {
	var st unix.Stat_t
	return unix.Stat("/proc/self/ns/pid", &st) == nil && st.Ino == 0xEFFFFFFC
}

// onLoadAPI lets tests see the programs StartAPIProbes loaded.
var onLoadAPI func(enter, ret *ebpf.Program)

// Trace adds a thread group to those whose returns are recorded.
func (p *APIProbes) Trace(tgid int) error {
	return p.objs.Traced.Put(uint32(tgid), uint8(1))
}

// Untrace removes one (it exited: its pid may be reused).
func (p *APIProbes) Untrace(tgid int) {
	_ = p.objs.Traced.Delete(uint32(tgid)) // absent already is fine; the map is bounded
}

// AttachLibs probes the libraries and closes their files.
func (p *APIProbes) AttachLibs(libs []*snapshot.LibFile) { p.probes.AttachLibs(libs) }

// PreProbe probes a launched target's libraries in the background once it
// has run for a while (uprobe's preProbeAfter), unless the probes are
// closed first; it closes their files. A library opened before then by its own name is
// probed at that open's stop (AttachOpened).
func (p *APIProbes) PreProbe(libs []*snapshot.LibFile) {
	p.probes.PreProbe(libs, func() bool { return true })
}

// AttachOpened probes the library that process (or thread) pid has just
// opened as fd, named name, unless that file is probed already. The opener
// must be stopped until it returns, so that no call into it is missed.
func (p *APIProbes) AttachOpened(pid, fd int, name string) { p.probes.AttachOpened(pid, fd, name) }

// Drain delivers the api events recorded so far, without waiting: each is
// valid only during the call (Seq is the decoder's own; the caller numbers
// events in its order).
func (p *APIProbes) Drain(deliver func(*tracer.Event)) {
	if p.readErr != nil || p.rd.AvailableBytes() == 0 {
		return
	}
	p.rd.SetDeadline(time.Unix(0, 1)) // read what is there, then return
	for {
		err := p.rd.ReadInto(&p.rec)
		switch {
		case err == nil:
			ev, derr := p.dec.decode(p.rec.RawSample)
			if derr != nil || ev.Kind != tracer.KindAPI && ev.Kind != tracer.KindEnv {
				p.undecodable++ // counted with the losses
				continue
			}
			deliver(ev)
		case errors.Is(err, os.ErrDeadlineExceeded):
			return
		default:
			p.readErr = err
			return
		}
	}
}

// Libraries lists the library files probed.
func (p *APIProbes) Libraries() []string { return p.probes.Libraries() }

// Notes are what the report must say about the probes (a library that
// could not be probed, one with none of the entry points).
func (p *APIProbes) Notes() []string {
	notes := p.probes.Notes()
	if p.readErr != nil {
		notes = append(notes, fmt.Sprintf("reading CUDA's return codes failed: %v; the trace is incomplete", p.readErr))
	}
	return notes
}

// Lost counts the api events lost: the ring was full, or a record could
// not be decoded. Non-zero means the trace is incomplete.
func (p *APIProbes) Lost() uint64 {
	n := p.undecodable
	var perCPU []uint64
	if p.objs.Drops.Lookup(uint32(bpfDropReasonDROP_RINGBUF), &perCPU) == nil {
		for _, c := range perCPU {
			n += c
		}
	}
	return n
}

// Close detaches every probe and frees the programs and maps.
func (p *APIProbes) Close() {
	p.probes.Close()
	_ = p.rd.Close() // best-effort cleanup: nothing to do if it fails
	p.closeObjs()
}

func (p *APIProbes) closeObjs() {
	p.objs.close()
	if p.rest != nil {
		p.rest.Close()
	}
}
