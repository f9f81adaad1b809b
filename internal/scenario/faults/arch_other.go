//go:build !amd64 && !arm64

package faults

// No seccomp fault injection on this architecture: ParseDeny refuses every
// name.
const nativeArch = 0

var syscallNumbers = map[string]uint32{}
