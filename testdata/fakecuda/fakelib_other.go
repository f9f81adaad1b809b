//go:build !amd64

package main

import "unsafe"

const canCallLib = false

func callLib1(fn, arg uintptr) uintptr { panic("fakecuda: --cuinit-lib needs amd64") }

func unsafePointer(b []byte) unsafe.Pointer { return unsafe.Pointer(&b[0]) }
