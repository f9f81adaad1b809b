package ebpf

import (
	"maps"
	"slices"
	"testing"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"

	"github.com/cudatrace/cudatrace/internal/privtest"

	"github.com/cudatrace/cudatrace/diagnose/record"
	"github.com/cudatrace/cudatrace/tracer"
)

// rawSample lays out one ring-buffer sample as the BPF side writes it.
func rawSample(e bpfEvent) []byte {
	buf := make([]byte, eventSize)
	*(*bpfEvent)(unsafe.Pointer(&buf[0])) = e
	return buf
}

func setCStr(dst []int8, s string) {
	for i := range len(s) {
		dst[i] = int8(s[i])
	}
	dst[len(s)] = 0
}

// w1Samples are the two events of one W1 iteration (scripts/bench): an
// open of a device node and a successful ioctl on it.
func w1Samples() [][]byte {
	var open, ioctl bpfEvent
	for _, e := range []*bpfEvent{&open, &ioctl} {
		e.Tgid, e.Tid, e.Ktime = 4242, 4242, 1_000_000
		e.HasDev, e.DevMajor, e.DevMinor = 1, 195, 255
		setCStr(e.Comm[:], "python3")
	}
	open.Kind, open.Syscall, open.Ret, open.Flags = uint8(bpfEventKindKIND_OPEN), uint16(bpfSyscallIdSC_OPENAT), 5, 0o2000002
	setCStr(open.Path[:], "/dev/nvidiactl")
	ioctl.Kind, ioctl.Syscall, ioctl.Fd, ioctl.Request = uint8(bpfEventKindKIND_IOCTL), uint16(bpfSyscallIdSC_IOCTL), 5, 0xc020462a
	ioctl.ArgLen = 32
	// Cut as the BPF side sends them: the open after its path, the ioctl
	// after its params block.
	pathOff := int(unsafe.Offsetof(open.Path))
	open.PathLen = uint16(len("/dev/nvidiactl") + 1)
	return [][]byte{rawSample(open)[:pathOff+int(open.PathLen)], rawSample(ioctl)[:pathOff]}
}

// BenchmarkPipeline is the user-space cost per event of an eBPF trace:
// decoding a sample, then the Recorder (diagnose/record) (what cudatrace's sink
// does). Reading the ring itself is the kernel's and cilium/ebpf's part.
func BenchmarkPipeline(b *testing.B) {
	samples := w1Samples()
	b.Run("decode", func(b *testing.B) {
		d := newDecoder(0)
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			if _, err := d.decode(samples[i&1]); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decode+record", func(b *testing.B) {
		d := newDecoder(0)
		rec := record.New()
		var sink tracer.Sink = rec
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			ev, err := d.decode(samples[i&1])
			if err != nil {
				b.Fatal(err)
			}
			sink.Event(ev)
		}
		if rec.Seen != uint64(b.N) {
			b.Fatalf("recorder saw %d events, want %d", rec.Seen, b.N)
		}
	})
}

// BenchmarkLoad is the start-up cost that does not depend on the target:
// reading the kernel's BTF (not cached between calls), configuring,
// and loading every program and map.
func BenchmarkLoad(b *testing.B) {
	privtest.RequireRoot(b)
	b.Run("kernel-btf+configure", func(b *testing.B) {
		for b.Loop() {
			spec, err := loadBpf()
			if err != nil {
				b.Fatal(err)
			}
			if err := configure(spec, btf.NewCache(), foldAfter{}, false, kernelSupport()); err != nil {
				b.Fatal(err)
			}
		}
	})
	// The run-time choice of syscall hook (a refused or loaded fentry
	// program), with the kernel's BTF already parsed as in a run.
	b.Run("fentry-probe", func(b *testing.B) {
		cache := btf.NewCache()
		if _, err := cache.Kernel(); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			chooseSyscallHook(cache, false)
		}
	})
	// Each program on its own: its share of the verifier's time.
	spec, err := loadBpf()
	if err != nil {
		b.Fatal(err)
	}
	cache := btf.NewCache()
	if err := configure(spec, cache, foldAfter{}, false, kernelSupport()); err != nil {
		b.Fatal(err)
	}
	made, err := createMaps(spec)
	if err != nil {
		b.Fatal(err)
	}
	defer closeMaps(made)
	names := slices.Sorted(maps.Keys(spec.Programs))
	for _, name := range names {
		b.Run("program="+name, func(b *testing.B) {
			part := spec.Copy()
			part.Programs = map[string]*ebpf.ProgramSpec{name: spec.Programs[name]}
			for b.Loop() {
				coll, err := ebpf.NewCollectionWithOptions(part, ebpf.CollectionOptions{Cache: cache, MapReplacements: made})
				if err != nil {
					b.Fatal(err)
				}
				coll.Close()
			}
		})
	}
	for _, tc := range []struct {
		name string
		load func(*ebpf.CollectionSpec, *btf.Cache) (*ebpf.Collection, error)
	}{
		{"collection-sequential", func(s *ebpf.CollectionSpec, c *btf.Cache) (*ebpf.Collection, error) {
			return ebpf.NewCollectionWithOptions(s, ebpf.CollectionOptions{Cache: c})
		}},
		{"collection-parallel", func(s *ebpf.CollectionSpec, c *btf.Cache) (*ebpf.Collection, error) {
			maps, err := createMaps(s)
			if err != nil {
				return nil, err
			}
			defer closeMaps(maps)
			return loadCollection(s, c, maps)
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			spec, err := loadBpf()
			if err != nil {
				b.Fatal(err)
			}
			cache := btf.NewCache()
			if err := configure(spec, cache, foldAfter{}, false, kernelSupport()); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				coll, err := tc.load(spec, cache)
				if err != nil {
					b.Fatal(err)
				}
				coll.Close()
			}
		})
	}
}

// BenchmarkStartup is a whole launch of /bin/true: loader start, BTF,
// maps, program loads, attach, the target's run, detach. With
// -cpuprofile it shows where cudatrace's own start-up CPU goes.
func BenchmarkStartup(b *testing.B) {
	privtest.RequireRoot(b)
	for b.Loop() {
		res, err := New().Run(privtest.Deadline(b), tracer.Spec{Argv: []string{"/bin/true"}}, &recorder{})
		if err != nil {
			b.Fatal(err)
		}
		if res.Exit == nil || res.Exit.Code != 0 {
			b.Fatalf("/bin/true: exit %+v", res.Exit)
		}
	}
}
