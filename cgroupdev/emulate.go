package cgroupdev

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"unsafe"
)

// MaxSteps bounds how many instructions Emulate executes. The verifier
// rejects loops it cannot bound, so a real device program finishes in far
// fewer steps; hitting the bound means the input is not one.
const MaxSteps = 1 << 16

// Verdict is the outcome of running one device program on one request.
type Verdict struct {
	Allowed bool  // R0 & 1 at exit
	Insns   int   // instructions executed
	Err     error // the program could not be emulated; Allowed is meaningless
}

// BPF instruction encoding (include/uapi/linux/bpf.h, bpf_common.h).
const (
	clsLD    = 0x00
	clsLDX   = 0x01
	clsST    = 0x02
	clsSTX   = 0x03
	clsALU   = 0x04
	clsJMP   = 0x05
	clsJMP32 = 0x06
	clsALU64 = 0x07

	srcX = 0x08

	sizeW  = 0x00
	sizeH  = 0x08
	sizeB  = 0x10
	sizeDW = 0x18

	modeIMM    = 0x00
	modeMEM    = 0x60
	modeMEMSX  = 0x80
	modeATOMIC = 0xc0
	modeNOSPEC = 0xc0 // with class ST: speculation barrier inserted by the verifier

	opAdd  = 0x00
	opSub  = 0x10
	opMul  = 0x20
	opDiv  = 0x30
	opOr   = 0x40
	opAnd  = 0x50
	opLsh  = 0x60
	opRsh  = 0x70
	opNeg  = 0x80
	opMod  = 0x90
	opXor  = 0xa0
	opMov  = 0xb0
	opArsh = 0xc0
	opEnd  = 0xd0

	jA    = 0x00
	jEQ   = 0x10
	jGT   = 0x20
	jGE   = 0x30
	jSET  = 0x40
	jNE   = 0x50
	jSGT  = 0x60
	jSGE  = 0x70
	jCALL = 0x80
	jEXIT = 0x90
	jLT   = 0xa0
	jLE   = 0xb0
	jSLT  = 0xc0
	jSLE  = 0xd0

	atomicFetch   = 0x01
	atomicXchg    = 0xe0 | atomicFetch
	atomicCmpXchg = 0xf0 | atomicFetch

	insnSize  = 8
	stackSize = 512
	ctxSize   = 12 // struct bpf_cgroup_dev_ctx
)

// insn is one decoded struct bpf_insn.
type insn struct {
	code     uint8
	dst, src uint8
	off      int16
	imm      int32
}

func decodeInsn(b []byte) insn {
	return insn{
		code: b[0],
		dst:  b[1] & 0x0f,
		src:  b[1] >> 4,
		off:  int16(binary.LittleEndian.Uint16(b[2:])),
		imm:  int32(binary.LittleEndian.Uint32(b[4:])),
	}
}

func decodeInsns(raw []byte) ([]insn, error) {
	if len(raw)%insnSize != 0 {
		return nil, fmt.Errorf("program is %d bytes, not a multiple of %d", len(raw), insnSize)
	}
	out := make([]insn, len(raw)/insnSize)
	for i := range out {
		out[i] = decodeInsn(raw[i*insnSize:])
	}
	return out, nil
}

// Register kinds. A device program only ever sees two pointers, the context
// (R1 at entry) and the frame pointer (R10); everything else is a number.
// Tracking the kind lets loads go to the right memory without inventing
// addresses.
type regKind uint8

const (
	kScalar regKind = iota
	kCtx
	kStack
)

func (k regKind) String() string {
	return [...]string{"scalar", "context pointer", "stack pointer"}[k]
}

type reg struct {
	kind regKind
	v    uint64 // the value, or for pointers the offset from the base
}

// machine is the interpreter state for one run.
type machine struct {
	prog  []insn
	r     [11]reg
	ctx   [ctxSize]byte
	stack [stackSize]byte
	// spilled remembers pointers stored to 8-byte stack slots, so that a
	// spill and fill (which compilers emit) gives the pointer back.
	spilled [stackSize / 8]reg
}

// Emulate runs a BPF_CGROUP_DEVICE program (raw struct bpf_insn array,
// little-endian) on req, as the kernel would. It never panics: anything it
// cannot model (helper calls, maps, bad jumps, out-of-range memory) ends the
// run with Verdict.Err set.
func Emulate(raw []byte, req Request) Verdict {
	prog, err := decodeInsns(raw)
	if err != nil {
		return Verdict{Err: err}
	}
	if len(prog) == 0 {
		return Verdict{Err: fmt.Errorf("empty program")}
	}
	m := &machine{prog: prog}
	binary.LittleEndian.PutUint32(m.ctx[0:], req.accessType())
	binary.LittleEndian.PutUint32(m.ctx[4:], req.Major)
	binary.LittleEndian.PutUint32(m.ctx[8:], req.Minor)
	m.r[1] = reg{kind: kCtx}
	m.r[10] = reg{kind: kStack, v: stackSize}
	r0, n, err := m.run()
	if err != nil {
		return Verdict{Insns: n, Err: err}
	}
	return Verdict{Allowed: r0&1 == 1, Insns: n}
}

func (m *machine) run() (r0 uint64, steps int, err error) {
	pc := 0
	for steps = 0; steps < MaxSteps; steps++ {
		if pc < 0 || pc >= len(m.prog) {
			return 0, steps, fmt.Errorf("jump out of the program to instruction %d (program has %d)", pc, len(m.prog))
		}
		in := m.prog[pc]
		next, exit, err := m.step(pc, in)
		if err != nil {
			return 0, steps + 1, fmt.Errorf("instruction %d (opcode %#02x): %w", pc, in.code, err)
		}
		if exit {
			if m.r[0].kind != kScalar {
				return 0, steps + 1, fmt.Errorf("instruction %d: exit with a %s in R0", pc, m.r[0].kind)
			}
			return m.r[0].v, steps + 1, nil
		}
		pc = next
	}
	return 0, steps, fmt.Errorf("gave up after %d instructions (a loop the verifier would not accept?)", MaxSteps)
}

// step executes one instruction and returns the next pc.
func (m *machine) step(pc int, in insn) (next int, exit bool, err error) {
	if in.dst > 10 || in.src > 10 {
		return 0, false, fmt.Errorf("register r%d/r%d does not exist", in.dst, in.src)
	}
	switch in.code & 0x07 {
	case clsALU, clsALU64:
		return pc + 1, false, m.alu(in)
	case clsJMP, clsJMP32:
		return m.jump(pc, in)
	case clsLD:
		return m.ldImm64(pc, in)
	case clsLDX:
		return pc + 1, false, m.ldx(in)
	case clsST, clsSTX:
		return pc + 1, false, m.store(in)
	}
	return 0, false, fmt.Errorf("unknown instruction class")
}

func (m *machine) ldImm64(pc int, in insn) (int, bool, error) {
	if in.code != clsLD|modeIMM|sizeDW {
		return 0, false, fmt.Errorf("legacy packet load (LD_ABS/LD_IND) is not valid in device programs")
	}
	if pc+1 >= len(m.prog) {
		return 0, false, fmt.Errorf("LD_IMM64 is missing its second half")
	}
	if in.src != 0 {
		// Map references and other pseudo sources need kernel objects.
		return 0, false, fmt.Errorf("LD_IMM64 with pseudo source %d (a map or BTF object) is not supported", in.src)
	}
	if in.dst == 10 {
		return 0, false, fmt.Errorf("write to the read-only frame pointer r10")
	}
	hi := m.prog[pc+1]
	m.r[in.dst] = reg{v: uint64(uint32(in.imm)) | uint64(uint32(hi.imm))<<32}
	return pc + 2, false, nil
}

func (m *machine) alu(in insn) error {
	is64 := in.code&0x07 == clsALU64
	op := in.code & 0xf0
	if in.dst == 10 {
		return fmt.Errorf("write to the read-only frame pointer r10")
	}
	dst := m.r[in.dst]
	var src reg
	if in.code&srcX != 0 {
		src = m.r[in.src]
	} else {
		src = reg{v: uint64(int64(in.imm))} // imm is sign-extended to 64 bits
	}

	if op == opEnd {
		return m.byteswap(in, is64)
	}
	if op == opMov {
		switch {
		case in.off == 0 && is64:
			m.r[in.dst] = src
		case in.off == 0:
			if src.kind != kScalar {
				return fmt.Errorf("32-bit move of a %s", src.kind)
			}
			m.r[in.dst] = reg{v: uint64(uint32(src.v))}
		case in.off == 8 || in.off == 16 || in.off == 32: // MOVSX (cpu v4)
			if src.kind != kScalar {
				return fmt.Errorf("sign-extending move of a %s", src.kind)
			}
			v := signExtend(src.v, int(in.off))
			if !is64 {
				v = uint64(uint32(v))
			}
			m.r[in.dst] = reg{v: v}
		default:
			return fmt.Errorf("move with bad offset %d", in.off)
		}
		return nil
	}

	// Pointer arithmetic: only adding or subtracting a number to a pointer
	// keeps it a pointer; that is all the verifier allows on ctx and stack.
	if dst.kind != kScalar || src.kind != kScalar {
		switch {
		case is64 && op == opAdd && src.kind == kScalar:
			m.r[in.dst] = reg{kind: dst.kind, v: dst.v + src.v}
		case is64 && op == opAdd && dst.kind == kScalar:
			m.r[in.dst] = reg{kind: src.kind, v: dst.v + src.v}
		case is64 && op == opSub && src.kind == kScalar:
			m.r[in.dst] = reg{kind: dst.kind, v: dst.v - src.v}
		case is64 && op == opSub && src.kind == dst.kind:
			m.r[in.dst] = reg{v: dst.v - src.v} // distance between two pointers
		default:
			return fmt.Errorf("arithmetic (op %#02x) on a %s and a %s", op, dst.kind, src.kind)
		}
		return nil
	}

	signed := in.off == 1 // SDIV/SMOD (cpu v4) are DIV/MOD with off 1
	var v uint64
	var ok bool
	if is64 {
		v, ok = aluOp[uint64, int64](op, dst.v, src.v, signed)
	} else {
		var w uint32
		w, ok = aluOp[uint32, int32](op, uint32(dst.v), uint32(src.v), signed)
		v = uint64(w) // 32-bit results are zero-extended
	}
	if !ok {
		cls := "ALU"
		if is64 {
			cls = "ALU64"
		}
		return fmt.Errorf("unknown %s operation %#02x", cls, op)
	}
	m.r[in.dst] = reg{v: v}
	return nil
}

// aluOp is one arithmetic instruction on 32-bit (U uint32, S int32) or
// 64-bit words, as the kernel defines it: x/0 = 0, x%0 = x, shifts masked
// to the word's width, and the signed forms' MinInt / -1 without a trap.
func aluOp[U uint32 | uint64, S int32 | int64](op uint8, a, b U, signed bool) (U, bool) {
	mask := U(unsafe.Sizeof(a)*8 - 1)
	switch op {
	case opAdd:
		return a + b, true
	case opSub:
		return a - b, true
	case opMul:
		return a * b, true
	case opDiv:
		switch {
		case b == 0:
			return 0, true
		case signed && S(b) == -1:
			return -a, true
		case signed:
			return U(S(a) / S(b)), true
		}
		return a / b, true
	case opMod:
		switch {
		case b == 0:
			return a, true
		case signed && S(b) == -1:
			return 0, true
		case signed:
			return U(S(a) % S(b)), true
		}
		return a % b, true
	case opOr:
		return a | b, true
	case opAnd:
		return a & b, true
	case opXor:
		return a ^ b, true
	case opLsh:
		return a << (b & mask), true
	case opRsh:
		return a >> (b & mask), true
	case opArsh:
		return U(S(a) >> (b & mask)), true
	case opNeg:
		return -a, true
	}
	return 0, false
}

// byteswap handles BPF_END: in class ALU, to-little/to-big endian
// conversion (a truncation on a little-endian machine, a swap for "to big");
// in class ALU64, an unconditional swap (cpu v4 BSWAP).
func (m *machine) byteswap(in insn, is64 bool) error {
	d := m.r[in.dst]
	if d.kind != kScalar {
		return fmt.Errorf("byte swap of a %s", d.kind)
	}
	swap := is64 || in.code&srcX != 0 // srcX doubles as BPF_TO_BE
	var v uint64
	switch in.imm {
	case 16:
		v = uint64(uint16(d.v))
		if swap {
			v = uint64(bits.ReverseBytes16(uint16(v)))
		}
	case 32:
		v = uint64(uint32(d.v))
		if swap {
			v = uint64(bits.ReverseBytes32(uint32(v)))
		}
	case 64:
		v = d.v
		if swap {
			v = bits.ReverseBytes64(v)
		}
	default:
		return fmt.Errorf("byte swap of width %d", in.imm)
	}
	m.r[in.dst] = reg{v: v}
	return nil
}

func signExtend(v uint64, width int) uint64 {
	shift := 64 - width
	return uint64(int64(v<<shift) >> shift)
}

func (m *machine) jump(pc int, in insn) (next int, exit bool, err error) {
	is32 := in.code&0x07 == clsJMP32
	op := in.code & 0xf0
	switch op {
	case jEXIT:
		return 0, true, nil
	case jCALL:
		switch in.src {
		case 0:
			return 0, false, fmt.Errorf("call to BPF helper %d is not supported", in.imm)
		case 1:
			return 0, false, fmt.Errorf("BPF-to-BPF call (to instruction %d) is not supported", pc+1+int(in.imm))
		default:
			return 0, false, fmt.Errorf("call to kernel function (BTF id %d) is not supported", in.imm)
		}
	case jA:
		if is32 { // gotol: the offset is in imm
			return pc + 1 + int(in.imm), false, nil
		}
		return pc + 1 + int(in.off), false, nil
	case 0xe0: // JCOND (may_goto) - a bounded loop hint; never taken here
		return pc + 1, false, nil
	}

	dst := m.r[in.dst]
	var src reg
	if in.code&srcX != 0 {
		src = m.r[in.src]
	} else {
		src = reg{v: uint64(int64(in.imm))}
	}
	if dst.kind != kScalar || src.kind != kScalar {
		if dst.kind != src.kind {
			return 0, false, fmt.Errorf("comparison of a %s with a %s", dst.kind, src.kind)
		}
	}
	a, b := dst.v, src.v
	if is32 {
		a, b = uint64(uint32(a)), uint64(uint32(b))
	}
	var sa, sb int64 = int64(a), int64(b)
	if is32 {
		sa, sb = int64(int32(a)), int64(int32(b))
	}
	var taken bool
	switch op {
	case jEQ:
		taken = a == b
	case jNE:
		taken = a != b
	case jGT:
		taken = a > b
	case jGE:
		taken = a >= b
	case jLT:
		taken = a < b
	case jLE:
		taken = a <= b
	case jSET:
		taken = a&b != 0
	case jSGT:
		taken = sa > sb
	case jSGE:
		taken = sa >= sb
	case jSLT:
		taken = sa < sb
	case jSLE:
		taken = sa <= sb
	default:
		return 0, false, fmt.Errorf("unknown jump operation %#02x", op)
	}
	if taken {
		return pc + 1 + int(in.off), false, nil
	}
	return pc + 1, false, nil
}

func memSize(code uint8) int {
	switch code & 0x18 {
	case sizeB:
		return 1
	case sizeH:
		return 2
	case sizeW:
		return 4
	}
	return 8
}

// memory resolves a pointer register plus offset to a byte slice of the
// context or the stack, checking bounds.
func (m *machine) memory(base reg, off int16, size int, write bool) ([]byte, int, error) {
	addr := int64(base.v) + int64(off)
	switch base.kind {
	case kCtx:
		if write {
			return nil, 0, fmt.Errorf("write to the read-only device context")
		}
		if addr < 0 || addr+int64(size) > ctxSize {
			return nil, 0, fmt.Errorf("%d-byte context read at offset %d is outside struct bpf_cgroup_dev_ctx", size, addr)
		}
		return m.ctx[addr : addr+int64(size)], int(addr), nil
	case kStack:
		if addr < 0 || addr+int64(size) > stackSize {
			return nil, 0, fmt.Errorf("%d-byte stack access at fp%+d is outside the 512-byte stack", size, addr-stackSize)
		}
		return m.stack[addr : addr+int64(size)], int(addr), nil
	}
	return nil, 0, fmt.Errorf("memory access through a number (%#x), not a pointer", base.v)
}

func getLE(b []byte) uint64 {
	var v uint64
	for i := len(b) - 1; i >= 0; i-- {
		v = v<<8 | uint64(b[i])
	}
	return v
}

func putLE(b []byte, v uint64) {
	for i := range b {
		b[i] = byte(v)
		v >>= 8
	}
}

func (m *machine) ldx(in insn) error {
	mode := in.code & 0xe0
	if mode != modeMEM && mode != modeMEMSX {
		return fmt.Errorf("load mode %#02x is not supported", mode)
	}
	if in.dst == 10 {
		return fmt.Errorf("write to the read-only frame pointer r10")
	}
	size := memSize(in.code)
	b, addr, err := m.memory(m.r[in.src], in.off, size, false)
	if err != nil {
		return err
	}
	if m.r[in.src].kind == kStack && size == 8 && addr%8 == 0 && m.spilled[addr/8].kind != kScalar {
		m.r[in.dst] = m.spilled[addr/8] // fill a spilled pointer
		return nil
	}
	v := getLE(b)
	if mode == modeMEMSX && size < 8 {
		v = signExtend(v, size*8)
	}
	m.r[in.dst] = reg{v: v}
	return nil
}

func (m *machine) store(in insn) error {
	mode := in.code & 0xe0
	isSTX := in.code&0x07 == clsSTX
	if !isSTX && mode == modeNOSPEC {
		return nil // speculation barrier: no effect on results
	}
	size := memSize(in.code)
	switch {
	case mode == modeMEM:
	case isSTX && mode == modeATOMIC && (size == 4 || size == 8):
		return m.atomic(in, size)
	default:
		return fmt.Errorf("store mode %#02x is not supported", mode)
	}
	b, addr, err := m.memory(m.r[in.dst], in.off, size, true)
	if err != nil {
		return err
	}
	var val reg
	if isSTX {
		val = m.r[in.src]
	} else {
		val = reg{v: uint64(int64(in.imm))}
	}
	m.clearSpill(addr, size)
	if val.kind != kScalar {
		if size != 8 || addr%8 != 0 {
			return fmt.Errorf("partial or unaligned spill of a %s", val.kind)
		}
		m.spilled[addr/8] = val
		putLE(b, 0)
		return nil
	}
	putLE(b, val.v)
	return nil
}

func (m *machine) clearSpill(addr, size int) {
	for a := addr &^ 7; a < addr+size; a += 8 {
		m.spilled[a/8] = reg{}
	}
}

// atomic handles BPF_ATOMIC on the stack (the only writable memory here).
func (m *machine) atomic(in insn, size int) error {
	b, addr, err := m.memory(m.r[in.dst], in.off, size, true)
	if err != nil {
		return err
	}
	if m.spilled[addr/8].kind != kScalar || m.r[in.src].kind != kScalar {
		return fmt.Errorf("atomic operation on a pointer")
	}
	old := getLE(b)
	src := m.r[in.src].v
	if size == 4 {
		src = uint64(uint32(src))
	}
	var nv uint64
	switch in.imm {
	case opAdd, opAdd | atomicFetch:
		nv = old + src
	case opOr, opOr | atomicFetch:
		nv = old | src
	case opAnd, opAnd | atomicFetch:
		nv = old & src
	case opXor, opXor | atomicFetch:
		nv = old ^ src
	case atomicXchg:
		nv = src
	case atomicCmpXchg:
		if m.r[0].kind != kScalar {
			return fmt.Errorf("cmpxchg against a %s in R0", m.r[0].kind)
		}
		cmp := m.r[0].v
		if size == 4 {
			cmp = uint64(uint32(cmp))
		}
		nv = old
		if old == cmp {
			nv = src
		}
		putLE(b, nv)
		m.r[0] = reg{v: old}
		return nil
	default:
		return fmt.Errorf("atomic operation %#x is not supported", in.imm)
	}
	putLE(b, nv)
	if in.imm&atomicFetch != 0 {
		m.r[in.src] = reg{v: old}
	}
	return nil
}
