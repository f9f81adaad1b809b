//go:build !amd64

package ptrace

func legacyCalls(prefix string) {}

const haveLegacy = false
