package ebpf

import (
	"cmp"
	"fmt"
	"math"
	"slices"

	"github.com/cilium/ebpf"

	"github.com/cudatrace/cudatrace/tracer"
)

func foldSettings(spec tracer.Spec) (foldAfter, error) {
	for _, n := range []int{spec.FoldIoctlsAfter, spec.FoldCallsAfter} {
		if n < 0 || uint64(n) > math.MaxUint32 {
			return foldAfter{}, fmt.Errorf("fold threshold %d out of range", n)
		}
	}
	return foldAfter{ioctls: uint32(spec.FoldIoctlsAfter), calls: uint32(spec.FoldCallsAfter)}, nil
}

// folded reads the per-site counts once the programs record nothing more:
// each site past its threshold had that many calls sent and the rest only
// counted here.
func (s *session) folded() ([]tracer.Folded, error) {
	var out []tracer.Folded
	err := pastThreshold(s.coll.Maps[bpfMapIoctlSites], s.fold.ioctls, &out,
		func(site bpfIoctlSite) (tracer.Folded, error) { return ioctlFolded(site), nil })
	if err != nil {
		return nil, fmt.Errorf("read ioctl counts: %w", err)
	}
	err = pastThreshold(s.coll.Maps[bpfMapCallSites], s.fold.calls, &out, callFolded)
	if err != nil {
		return nil, fmt.Errorf("read call counts: %w", err)
	}
	// Map order is hash order: sort, so reports come out the same.
	slices.SortFunc(out, func(a, b tracer.Folded) int {
		return cmp.Or(cmp.Compare(a.PID, b.PID), cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Path, b.Path), cmp.Compare(a.Errno, b.Errno),
			cmp.Compare(a.Dev.Major, b.Dev.Major), cmp.Compare(a.Dev.Minor, b.Dev.Minor), cmp.Compare(a.Request, b.Request))
	})
	return out, nil
}

// ioctlFolded and callFolded say which site a fold-map key is (Count
// left for the caller).
func ioctlFolded(site bpfIoctlSite) tracer.Folded {
	return tracer.Folded{
		PID:     int(site.Tgid),
		Kind:    tracer.KindIoctl,
		Dev:     tracer.Dev{Major: site.Major, Minor: site.Minor},
		Request: site.Request,
	}
}

func callFolded(site bpfCallSite) (tracer.Folded, error) {
	if int(site.Kind) >= len(kinds) || kinds[site.Kind] == "" {
		return tracer.Folded{}, fmt.Errorf("unknown kind %d", site.Kind)
	}
	if kinds[site.Kind] == tracer.KindLimit {
		// The site is the call and its errno (cudatrace.c, limit_exit).
		sc, errno := int(uint8(site.Path[0])), int(uint8(site.Path[1]))
		if sc >= len(syscallNames) || syscallNames[sc] == "" {
			return tracer.Folded{}, fmt.Errorf("unknown syscall %d", sc)
		}
		return tracer.Folded{PID: int(site.Tgid), Kind: tracer.KindLimit, Path: syscallNames[sc], Errno: errno}, nil
	}
	return tracer.Folded{PID: int(site.Tgid), Kind: kinds[site.Kind], Path: string(cstr(site.Path[:]))}, nil
}

// pastThreshold appends a Folded for every site of sites counted more than
// after times (after 0: folding was off).
func pastThreshold[K any](sites *ebpf.Map, after uint32, out *[]tracer.Folded, describe func(K) (tracer.Folded, error)) error {
	if after == 0 {
		return nil
	}
	var (
		site K
		n    uint64
	)
	it := sites.Iterate()
	for it.Next(&site, &n) {
		if n <= uint64(after) {
			continue
		}
		f, err := describe(site)
		if err != nil {
			return err
		}
		f.Count = n - uint64(after)
		*out = append(*out, f)
	}
	return it.Err()
}
