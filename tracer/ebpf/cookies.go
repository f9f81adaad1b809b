package ebpf

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
)

// withCookie is ret with its bpf_get_attach_cookie calls made the cookie
// itself (mov r0, cookie): the program of one entry point, for a kernel
// without attach cookies (before 5.15). The cookie fits 31 bits
// (uprobe's apiCookie: library index << 16 | function index).
func withCookie(ret *ebpf.ProgramSpec, cookie uint64) (*ebpf.ProgramSpec, error) {
	if cookie > 1<<31-1 {
		return nil, fmt.Errorf("attach cookie %#x does not fit an immediate", cookie)
	}
	p := ret.Copy()
	n := 0
	for i := range p.Instructions {
		ins := &p.Instructions[i]
		if ins.IsBuiltinCall() && ins.Constant == int64(asm.FnGetAttachCookie) {
			*ins = asm.Mov.Imm(asm.R0, int32(cookie)).WithMetadata(ins.Metadata)
			n++
		}
	}
	if n == 0 {
		return nil, errors.New(ret.Name + ": no bpf_get_attach_cookie call to replace")
	}
	return p, nil
}

// retCopies loads, per cookie, a copy of ret (withCookie) on the maps in
// made, the loaded ones of spec, the object's (configured): uprobe's
// Objects.RetFor.
func retCopies(spec *ebpf.CollectionSpec, ret *ebpf.ProgramSpec, made map[string]*ebpf.Map, opts ebpf.CollectionOptions) func(uint64) (*ebpf.Program, error) {
	return func(cookie uint64) (*ebpf.Program, error) {
		p, err := withCookie(ret, cookie)
		if err != nil {
			return nil, err
		}
		one := &ebpf.CollectionSpec{Maps: spec.Maps, Variables: spec.Variables, Types: spec.Types, ByteOrder: spec.ByteOrder,
			Programs: map[string]*ebpf.ProgramSpec{p.Name: p}}
		part, replace := groupSpec(one, []string{p.Name}, made)
		opts := opts
		opts.MapReplacements = replace
		coll, err := ebpf.NewCollectionWithOptions(part, opts)
		if err != nil {
			return nil, loadError(err, false)
		}
		defer coll.Close() // its clones of the maps
		return coll.DetachProgram(p.Name), nil
	}
}
