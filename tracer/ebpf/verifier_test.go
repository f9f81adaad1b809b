package ebpf

import (
	"fmt"
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
// Where the kernel has bpf_loop, the bounded loops that stand in for it
// before 5.17 are loaded too.
func TestEveryProgramLoads(t *testing.T) {
	privtest.RequireRoot(t)
	v := kernelSupport()
	if v.missing != nil {
		t.Fatal(v.missing)
	}
	loops := []bool{false}
	if v.loop {
		loops = append(loops, true)
	}
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
			t.Run(fmt.Sprintf("host-wide=%v/bpf_loop=%v", hostWide, loop), func(t *testing.T) { loadEach(t, spec) })
		}
	}
}

func loadEach(t *testing.T, spec *ebpf.CollectionSpec) {
	for name := range spec.Programs {
		t.Run(name, func(t *testing.T) {
			one := spec.Copy()
			for other := range one.Programs {
				if other != name {
					delete(one.Programs, other)
				}
			}
			start := time.Now()
			coll, err := ebpf.NewCollectionWithOptions(one, ebpf.CollectionOptions{Programs: ebpf.ProgramOptions{LogLevel: ebpf.LogLevelStats}})
			if err != nil {
				t.Fatalf("%s: %+v", name, err) // the whole log: the line that fails is rarely the last
			}
			took := time.Since(start) // maps and BTF included; a log, not an assertion
			info, _ := coll.Programs[name].Info()
			if insns, ok := info.VerifiedInstructions(); ok {
				// The kernel's own "verification time N usec" line says
				// what the verifier took of it.
				verifier := ""
				for _, l := range strings.Split(coll.Programs[name].VerifierLog, "\n") {
					if strings.HasPrefix(l, "verification time") {
						verifier = ", " + l
					}
				}
				t.Logf("%s: %d verified instructions, loaded in %v%s", name, insns, took.Round(time.Millisecond/10), verifier)
			}
			coll.Close()
		})
	}
}
