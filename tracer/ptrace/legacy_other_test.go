//go:build !amd64

package ptracetrace

func legacyCalls(prefix string) {}

const haveLegacy = false
