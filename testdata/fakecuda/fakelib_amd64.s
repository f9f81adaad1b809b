#include "textflag.h"

// func callLib1(fn, arg uintptr) uintptr
// The callee (fakelib.go's cuInit: mov eax, edi; ret) uses no stack but
// its return address and touches only AX.
TEXT ·callLib1(SB), NOSPLIT, $0-24
	MOVQ fn+0(FP), AX
	MOVQ arg+8(FP), DI
	CALL AX
	MOVQ AX, ret+16(FP)
	RET
