package main

import "unsafe"

const canCallLib = true

// callLib1 calls the C function at fn with one integer argument and
// returns its integer result (fakelib_amd64.s).
func callLib1(fn, arg uintptr) uintptr

func unsafePointer(b []byte) unsafe.Pointer { return unsafe.Pointer(&b[0]) }
