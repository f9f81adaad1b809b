//go:build !amd64 && !arm64

package ptrace

// Other architectures: no table, and Probe reports the backend unavailable.
const nativeArch = 0

const x32SyscallBit = 0

var nativeSyscalls = map[uint64]sysID{}

// rollbackValue: no calls are traced here.
func rollbackValue(*call) int64 { return -1 }
