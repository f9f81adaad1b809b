//go:build !amd64

package ebpf

import "golang.org/x/sys/unix"

const haveLegacyOpen = false

func legacyOpen(string, int) (int, error)     { return -1, unix.ENOSYS }
func legacyCreat(string, uint32) (int, error) { return -1, unix.ENOSYS }
