//go:build !amd64 && !arm64

package loader

// sysSeccomp 0: no filter can be installed (the ptrace backend, which
// alone asks for one, runs on amd64 and arm64 only).
const sysSeccomp = 0
