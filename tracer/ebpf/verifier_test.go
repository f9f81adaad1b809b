package ebpf

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cudatrace/cudatrace/internal/privtest"
)

// TestEveryProgramLoads loads each program on its own, so that a verifier
// rejection names the program, in both modes (host-wide code is pruned
// unchecked in the other).
// Each hook the kernel allows is loaded with its programs only.
// Where the kernel has bpf_loop, the bounded loops that stand in for it
// before 5.17 are loaded too.
func TestEveryProgramLoads(t *testing.T) {
	privtest.RequireRoot(t)
	v := kernelSupport()
	if v.missing != nil {
		t.Fatal(v.missing)
	}
	if v.oldKernel != "" {
		t.Logf("the main object needs what this kernel lacks (%s): the old object's programs", v.oldKernel)
		loadOldKernelObject(t, v)
		return
	}
	loops := []bool{false}
	if v.loop {
		loops = append(loops, true)
	}
	for _, hook := range hooks(t) {
		for _, hostWide := range []bool{false, true} {
			for _, loop := range loops {
				spec, err := loadBpf()
				if err != nil {
					t.Fatal(err)
				}
				v.loop = loop
				// Folding on, or the verifier prunes its code unchecked.
				if err := configure(spec, btf.NewCache(), foldAfter{ioctls: 8, calls: 32}, hostWide, v); err != nil {
					t.Fatal(err)
				}
				// The fentry targets made unambiguous in this cache, as a run does.
				cache := btf.NewCache()
				var plan *fentryPlan
				if hook == hookFentry {
					var why string
					if plan, why = fentryTargets(cache); plan == nil {
						t.Fatal(why)
					}
				}
				if hook == hookFentry {
					if err := withFentry(spec); err != nil {
						t.Fatal(err)
					}
				}
				if _, err := useHook(spec, hook, plan); err != nil {
					t.Fatal(err)
				}
				if hook == hookFentry && !loop {
					boundedSubset(spec)
				}
				t.Run(fmt.Sprintf("%s/host-wide=%v/bpf_loop=%v", hook, hostWide, loop), func(t *testing.T) { loadEach(t, spec, cache) })
			}
		}
	}
}

// The old object's programs load on a kernel that would take the main one
// too, as TestEveryProgramLoads loads them where the kernel takes them
// (5.10). A test of its own: under TCG, with the main object's, they took
// TestEveryProgramLoads past its deadline on 6.1.
func TestOldKernelProgramsLoad(t *testing.T) {
	privtest.RequireRoot(t)
	v := kernelSupport()
	if v.missing != nil {
		t.Fatal(v.missing)
	}
	loadOldKernelObject(t, v)
}

// loadOldKernelObject loads each program of the object for older kernels,
// as a run loads them there: the raw tracepoints, bounded loops, and
// ct_api_ret as one entry point's copy (its cookie a constant).
func loadOldKernelObject(t *testing.T, v kernelVariants) {
	v.loop = false
	for _, hostWide := range []bool{false, true} {
		spec, err := loadOldkernel()
		if err != nil {
			t.Fatal(err)
		}
		if err := configure(spec, btf.NewCache(), foldAfter{ioctls: 8, calls: 32}, hostWide, v); err != nil {
			t.Fatal(err)
		}
		ret, err := withCookie(spec.Programs[bpfProgCtApiRet], 1<<16|3)
		if err != nil {
			t.Fatal(err)
		}
		spec.Programs[bpfProgCtApiRet] = ret
		if _, err := useHook(spec, hookRawTracepoint, nil); err != nil {
			t.Fatal(err)
		}
		t.Run(fmt.Sprintf("host-wide=%v", hostWide), func(t *testing.T) { loadEach(t, spec, btf.NewCache()) })
	}
}

func loadEach(t *testing.T, spec *ebpf.CollectionSpec, cache *btf.Cache) {
	var progs, verified int
	var usec int64
	defer func() {
		t.Logf("all %d programs: %d verified instructions, verification time %d usec", progs, verified, usec)
	}()
	for name := range spec.Programs {
		t.Run(name, func(t *testing.T) {
			one := spec.Copy()
			for other := range one.Programs {
				if other != name {
					delete(one.Programs, other)
				}
			}
			start := time.Now()
			coll, err := ebpf.NewCollectionWithOptions(one, ebpf.CollectionOptions{Cache: cache, Programs: ebpf.ProgramOptions{LogLevel: ebpf.LogLevelStats}})
			if err != nil {
				// The whole log: the line that fails is rarely the last
				// (%+v of the wrapping error would cut it).
				var ve *ebpf.VerifierError
				if errors.As(err, &ve) {
					t.Fatalf("%s: %v\n%+v", name, err, ve)
				}
				t.Fatalf("%s: %v", name, err)
			}
			took := time.Since(start) // maps and BTF included; a log, not an assertion
			info, _ := coll.Programs[name].Info()
			if insns, ok := info.VerifiedInstructions(); ok {
				// The kernel's own "verification time N usec" line says
				// what the verifier took of it.
				verifier := ""
				for _, l := range strings.Split(coll.Programs[name].VerifierLog, "\n") {
					if n, ok := strings.CutPrefix(l, "verification time "); ok {
						verifier = ", " + l
						u, _ := strconv.ParseInt(strings.TrimSuffix(n, " usec"), 10, 64) // a log line: 0 if it changes
						usec += u
					}
				}
				t.Logf("%s: %d verified instructions, loaded in %v%s", name, insns, took.Round(time.Millisecond/10), verifier)
				progs++
				verified += int(insns)
			}
			coll.Close()
		})
	}
}

// boundedSubset keeps, of the fentry hook's programs, one pair per kind of
// entry, the shared exit and the seccomp one: with bounded loops each
// takes seconds to verify under TCG, and the others differ only in their
// constant.
func boundedSubset(spec *ebpf.CollectionSpec) {
	keep := map[string]bool{fentryProgCtFexitSeccomp: true, fentryProgCtFexitCommon: true}
	for _, fn := range []string{"openat", "openat2", "ioctl", "mknodat", "newfstatat", "statx", "memfd_create", "execve"} {
		keep["ct_fentry_"+fn], keep["ct_fexit_"+fn] = true, true
	}
	for name := range spec.Programs {
		if (strings.HasPrefix(name, "ct_fentry_") || strings.HasPrefix(name, "ct_fexit")) && !keep[name] {
			delete(spec.Programs, name)
		}
	}
}
