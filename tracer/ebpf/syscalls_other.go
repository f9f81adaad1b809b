//go:build !amd64 && !arm64

package ebpf

// syscallNumbers is empty where the BPF programs do not know the syscall
// register layout: configure refuses to load them.
var syscallNumbers = [...]int{}

var limitSyscallNumbers = map[bpfSyscallId]int{}
