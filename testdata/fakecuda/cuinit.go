package main

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// CUDA driver API results this program can report.
const (
	cudaSuccess       = 0
	cudaStubLibrary   = 34
	cudaNoDevice      = 100
	cudaOperatingSys  = 304
	cudaUnknown       = 999
	nvidiaMajor       = 195 // fixed major of nvidia.ko (nvidia0, nvidiactl)
	nvidiactlMinor    = 255
	uvmMinor          = 0
	nodeMode          = unix.S_IFCHR | 0o666
	procDevicesHeader = "Character devices:"
)

// ioctl requests from the recordings (_IOC(dir, type, nr, size) encoded).
const (
	ioctlCardInfo    = 0xC90046C8 // NV_ESC_CARD_INFO, 0x900 bytes
	ioctlCheckVer    = 0xC00846D6 // escape 0xd6, 8 bytes
	ioctlRMAlloc     = 0xC030462B // NV_ESC_RM_ALLOC
	ioctlRMControl   = 0xC020462A // NV_ESC_RM_CONTROL
	ioctlRMFree      = 0xC0104629 // NV_ESC_RM_FREE
	ioctlRegisterFD  = 0xC00446C9 // NV_ESC_REGISTER_FD on nvidia0
	ioctlUVMInit     = 0x30000001 // UVM_INITIALIZE
	ioctlUVMDeinit   = 0x30000002 // UVM_DEINITIALIZE, issued on fd -1 after a failed open
	ioctlUVMMMInit   = 0x4b       // UVM_MM_INITIALIZE (75), on the second uvm fd
	ioctlUVMPageable = 0x27       // UVM_PAGEABLE_MEM_ACCESS (39)
	defaultModprobe  = "/usr/bin/nvidia-modprobe"
	defaultProcDevs  = "/proc/devices"
	defaultDevPrefix = "/dev"
)

// sequence is one cuInit: the device-node calls libcuda makes, in its order.
type sequence struct {
	sys
	dev         string // directory standing in for /dev
	procDevices string
	modprobe    string
	libcuda     string // opened first, as the dynamic loader would; "" skips
	memfd       bool   // create a memfd like newer drivers do (seccomp denials show there)
	fds         []int  // closed when the sequence ends
}

func (q *sequence) devPath(name string) string { return filepath.Join(q.dev, name) }

func (q *sequence) keep(fd int) int {
	q.fds = append(q.fds, fd)
	return fd
}

func (q *sequence) closeAll() {
	for _, fd := range q.fds {
		q.close(fd)
	}
	q.fds = nil
}

// fakeDriverOK treats ENOTTY as success: the test nodes are backed by real
// drivers such as /dev/null (major 1), which know none of NVIDIA's ioctls.
// Reaching the driver at all is what the sequence is about.
func fakeDriverOK(err error) bool {
	return err == nil || errors.Is(err, unix.ENOTTY)
}

// run performs cuInit and returns its result code.
func (q *sequence) run() (int, error) {
	defer q.closeAll()
	if q.libcuda != "" {
		fd, err := q.openat(q.libcuda, unix.O_RDONLY|unix.O_CLOEXEC)
		if err != nil {
			return 0, &loadError{path: q.libcuda, err: err}
		}
		q.keep(fd)
		// The toolkit stub answers every call with CUDA_ERROR_STUB_LIBRARY
		// and never touches a device node.
		if strings.Contains(q.libcuda, "stubs/libcuda.so") {
			return cudaStubLibrary, nil
		}
	}

	ctl, code := q.openControl()
	if ctl < 0 {
		return code, nil
	}
	for _, req := range []uint32{ioctlCheckVer, ioctlCardInfo, ioctlRMAlloc, ioctlRMControl, ioctlRMFree} {
		if err := q.ioctl(ctl, req); !fakeDriverOK(err) {
			return cudaUnknown, nil
		}
	}
	if q.memfd {
		fd, err := q.memfdCreate("cuda")
		if err != nil {
			return cudaOperatingSys, nil
		}
		q.keep(fd)
	}

	if code := q.openUVM(ctl); code != cudaSuccess {
		return code, nil
	}

	if hidden() {
		return cudaNoDevice, nil
	}
	q.access("/sys/module/nvidia/initstate", unix.R_OK)
	q.readParams()
	gpu := q.devPath("nvidia0")
	q.ensureNode(gpu, "nvidia", nvidiaMajor, 0, false, "-c=0")
	q.readParams()
	q.stat(gpu)
	fd, err := q.openat(gpu, unix.O_RDWR|unix.O_CLOEXEC)
	if err != nil {
		return cudaNoDevice, nil
	}
	q.keep(fd)
	if err := q.ioctl(fd, ioctlRegisterFD); !fakeDriverOK(err) {
		return cudaUnknown, nil
	}
	return cudaSuccess, nil
}

// openControl opens nvidiactl (O_RDWR, then O_RDONLY as libcuda retries).
// It returns the fd, or -1 and the cuInit result.
func (q *sequence) openControl() (int, int) {
	q.access("/sys/module/nvidia/initstate", unix.R_OK)
	q.readParams()
	ctl := q.devPath("nvidiactl")
	q.ensureNode(ctl, "nvidiactl", nvidiaMajor, nvidiactlMinor, false, "-c=0")
	q.readParams()
	q.stat(ctl)
	fd, err := q.openat(ctl, unix.O_RDWR)
	if err != nil {
		fd, err = q.openat(ctl, unix.O_RDONLY)
	}
	if err != nil {
		return -1, cudaNoDevice
	}
	return q.keep(fd), cudaSuccess
}

// openUVM repairs and opens /dev/nvidia-uvm. Its major is dynamic, so it is
// looked up in /proc/devices by name and compared with the node's.
func (q *sequence) openUVM(ctl int) int {
	q.access("/sys/module/nvidia_uvm/initstate", unix.R_OK)
	uvm := q.devPath("nvidia-uvm")
	q.ensureNode(uvm, "nvidia-uvm", 0, uvmMinor, true, "-u", "-c=0")
	fd, err := q.openat(uvm, unix.O_RDWR|unix.O_CLOEXEC)
	if err != nil {
		fd, err = q.openat(uvm, unix.O_RDWR)
	}
	if err != nil {
		// libcuda tears down with the fd it never got, then frees its
		// RM objects on nvidiactl.
		q.ioctl(-1, ioctlUVMDeinit)
		q.ioctl(ctl, ioctlRMFree)
		q.ioctl(ctl, ioctlRMFree)
		return cudaUnknown
	}
	q.keep(fd)
	// libcuda opens a second fd for the mm half of UVM (recorded: two opens,
	// then UVM_INITIALIZE on the first, 0x4b on the second, 0x27 on the first).
	mm, err := q.openat(uvm, unix.O_RDWR|unix.O_CLOEXEC)
	if err != nil {
		return cudaUnknown
	}
	q.keep(mm)
	for _, c := range []struct {
		fd  int
		req uint32
	}{{fd, ioctlUVMInit}, {mm, ioctlUVMMMInit}, {fd, ioctlUVMPageable}} {
		if err := q.ioctl(c.fd, c.req); !fakeDriverOK(err) {
			return cudaUnknown
		}
	}
	return cudaSuccess
}

// ensureNode is libcuda's node check: stat the node; create it when missing;
// when checkMajor is set (nvidia-uvm), replace a node whose major differs
// from the registered one. Then it refreshes the /dev/char/M:m symlink and
// looks for nvidia-modprobe, running it when its own repair failed. Every
// error is ignored, as libcuda ignores them: the open that follows reports.
func (q *sequence) ensureNode(path, driver string, major, minor uint32, checkMajor bool, modprobeArgs ...string) {
	registered, known := uint32(0), false
	if checkMajor {
		registered, known = q.registeredMajor(driver)
	}
	st, err := q.stat(path)
	repairFailed := false
	switch {
	case err != nil && errors.Is(err, unix.ENOENT):
		if !checkMajor {
			registered, known = q.registeredMajor(driver)
			if !known {
				registered, known = major, true
			}
		}
		if known {
			repairFailed = q.mknodat(path, nodeMode, registered, minor) != nil
		} else {
			repairFailed = true
		}
	case err == nil && checkMajor && known && unix.Major(uint64(st.Rdev)) != registered:
		if q.unlink(path) != nil || q.mknodat(path, nodeMode, registered, minor) != nil {
			repairFailed = true
		}
	}
	if st, err = q.stat(path); err == nil {
		rdev := uint64(st.Rdev)
		char := q.devPath("char/" + strconv.Itoa(int(unix.Major(rdev))) + ":" + strconv.Itoa(int(unix.Minor(rdev))))
		q.unlink(char)
		q.symlink("../"+filepath.Base(path), char)
		q.stat(char)
	}
	if _, err := q.stat(q.modprobe); err == nil && repairFailed {
		q.runModprobe(modprobeArgs...)
	}
}

// runModprobe runs nvidia-modprobe and waits, as libcuda does; its exit
// status only matters through the node it did or did not create.
func (q *sequence) runModprobe(args ...string) {
	cmd := exec.Command(q.modprobe, args...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	err := cmd.Run()
	q.logf("%s %s: %v", q.modprobe, strings.Join(args, " "), err)
}

func (q *sequence) readParams() {
	if fd, err := q.openat("/proc/driver/nvidia/params", unix.O_RDONLY); err == nil {
		q.close(fd)
	}
}

// registeredMajor reads the driver's major from /proc/devices (character
// section), matching the name exactly.
func (q *sequence) registeredMajor(driver string) (uint32, bool) {
	fd, err := q.openat(q.procDevices, unix.O_RDONLY)
	if err != nil {
		return 0, false
	}
	f := os.NewFile(uintptr(fd), q.procDevices)
	defer f.Close()
	sc := bufio.NewScanner(f)
	inChar := false
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == procDevicesHeader:
			inChar = true
			continue
		case strings.HasSuffix(line, "devices:"):
			inChar = false
			continue
		}
		fields := strings.Fields(line)
		if !inChar || len(fields) != 2 || fields[1] != driver {
			continue
		}
		if n, err := strconv.ParseUint(fields[0], 10, 32); err == nil {
			return uint32(n), true
		}
	}
	return 0, false
}

// hidden reports whether CUDA_VISIBLE_DEVICES hides every GPU; libcuda then
// stops before opening any /dev/nvidiaN and cuInit says no device.
func hidden() bool {
	v, ok := os.LookupEnv("CUDA_VISIBLE_DEVICES")
	if !ok {
		return false
	}
	v = strings.TrimSpace(v)
	return v == "" || strings.HasPrefix(v, "-")
}

// loadError is the dynamic loader failing to open libcuda: ctypes raises and
// no cuInit result exists.
type loadError struct {
	path string
	err  error
}

func (e *loadError) Error() string {
	return filepath.Base(e.path) + ": cannot open shared object file: " + e.err.Error()
}
