package snapshot

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// QueryDevicePrograms returns the BPF_CGROUP_DEVICE programs that the kernel
// runs for processes in cgroupDir (its effective array: its own programs
// and those inherited from ancestors), with their instructions as the
// kernel holds them (xlated). AttachedTo is the cgroup, relative to
// cgroupRoot, that the program is attached to. With an empty cgroupRoot the
// root is found by walking up while the directory is on cgroup2.
//
// Needs root (CAP_SYS_ADMIN). When some programs cannot be read, it returns
// the ones it could and an error naming the others.
func QueryDevicePrograms(cgroupDir string, cgroupRoot string) ([]DeviceProgram, error) {
	dir, err := filepath.Abs(cgroupDir)
	if err != nil {
		return nil, err
	}
	root, err := findRoot(dir, cgroupRoot)
	if err != nil {
		return nil, err
	}

	effective, err := queryDir(dir, unix.BPF_F_QUERY_EFFECTIVE)
	if err != nil {
		return nil, err
	}
	if len(effective) == 0 {
		return nil, nil
	}

	// Where each program is attached: the nearest ancestor (or the cgroup
	// itself) whose own, non-effective list holds it.
	where := map[ebpf.ProgramID]attachment{}
	for d := dir; ; d = filepath.Dir(d) {
		own, err := queryDir(d, 0)
		if err != nil {
			return nil, err
		}
		flags, err := attachFlags(d)
		if err != nil {
			return nil, err
		}
		rel := "/" + strings.TrimPrefix(strings.TrimPrefix(d, root), "/")
		for _, p := range own {
			if _, done := where[p.ID]; !done {
				lid, _ := p.LinkID()
				where[p.ID] = attachment{path: rel, flags: flags, link: uint32(lid)}
			}
		}
		if d == root || d == "/" {
			break
		}
	}

	var progs []DeviceProgram
	var errs []error
	for _, ap := range effective {
		p, err := readProgram(ap.ID)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		at := where[ap.ID]
		p.AttachedTo, p.AttachFlags, p.LinkID = at.path, at.flags, at.link
		if lid, ok := ap.LinkID(); ok && p.LinkID == 0 {
			p.LinkID = uint32(lid)
		}
		progs = append(progs, p)
	}
	return progs, errors.Join(errs...)
}

type attachment struct {
	path  string
	flags uint32
	link  uint32
}

func findRoot(dir, root string) (string, error) {
	if root != "" {
		r, err := filepath.Abs(root)
		if err != nil {
			return "", err
		}
		if dir != r && !strings.HasPrefix(dir, r+"/") {
			return "", fmt.Errorf("cgroup %s is not under the cgroup root %s", dir, r)
		}
		return r, nil
	}
	if !isCgroup2(dir) {
		return "", fmt.Errorf("%s is not on a cgroup2 file system", dir)
	}
	r := dir
	for r != "/" && isCgroup2(filepath.Dir(r)) {
		r = filepath.Dir(r)
	}
	return r, nil
}

func isCgroup2(path string) bool {
	var st unix.Statfs_t
	return unix.Statfs(path, &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC
}

func openDir(path string) (int, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open cgroup %s: %w", path, err)
	}
	return fd, nil
}

func queryDir(path string, flags uint32) ([]link.AttachedProgram, error) {
	fd, err := openDir(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = unix.Close(fd) }() // read-only: a failed close loses nothing
	res, err := link.QueryPrograms(link.QueryOptions{Target: fd, Attach: ebpf.AttachCGroupDevice, QueryFlags: flags})
	if err != nil {
		// cilium/ebpf reports the kernel's EPERM for an unprivileged query
		// as "not supported (requires >= v4.15)", which misleads on any
		// modern kernel: name the real cause.
		if errors.Is(err, ebpf.ErrNotSupported) && !privilegedForBPF() {
			return nil, fmt.Errorf("query device programs of %s: operation not permitted (needs root, or CAP_BPF and CAP_SYS_ADMIN)", path)
		}
		return nil, fmt.Errorf("query device programs of %s: %w", path, err)
	}
	return res.Programs, nil
}

// attachFlags returns the BPF_F_* flags the cgroup's device programs were
// attached with. cilium/ebpf's QueryPrograms does not return them, so this
// issues BPF_PROG_QUERY itself, asking only for the flags and the count.
func attachFlags(path string) (uint32, error) {
	fd, err := openDir(path)
	if err != nil {
		return 0, err
	}
	defer func() { _ = unix.Close(fd) }() // read-only: a failed close loses nothing
	// The BPF_PROG_QUERY part of union bpf_attr, up to prog_cnt.
	var attr struct {
		targetFD    uint32
		attachType  uint32
		queryFlags  uint32
		attachFlags uint32
		progIDs     uint64
		progCnt     uint32
		_           uint32
	}
	attr.targetFD = uint32(fd)
	attr.attachType = uint32(ebpf.AttachCGroupDevice)
	_, _, errno := unix.Syscall(unix.SYS_BPF, unix.BPF_PROG_QUERY, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
	if errno != 0 {
		return 0, fmt.Errorf("query attach flags of %s: %w", path, errno)
	}
	return attr.attachFlags, nil
}

func readProgram(id ebpf.ProgramID) (DeviceProgram, error) {
	out := DeviceProgram{ID: uint32(id)}
	prog, err := ebpf.NewProgramFromID(id)
	if err != nil {
		return out, fmt.Errorf("open device program %d: %w", id, err)
	}
	defer func() { _ = prog.Close() }() // read-only: a failed close loses nothing
	info, err := prog.Info()
	if err != nil {
		return out, fmt.Errorf("device program %d: info: %w", id, err)
	}
	out.Name, out.Tag = info.Name, info.Tag
	insns, err := info.Instructions()
	if err != nil {
		return out, fmt.Errorf("device program %d: instructions: %w", id, err)
	}
	var buf bytes.Buffer
	if err := insns.Marshal(&buf, binary.LittleEndian); err != nil {
		return out, fmt.Errorf("device program %d: encode instructions: %w", id, err)
	}
	out.Instructions = buf.Bytes()
	return out, nil
}

// privilegedForBPF reports whether we hold CAP_SYS_ADMIN or CAP_BPF, which
// BPF_PROG_QUERY needs.
func privilegedForBPF() bool {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return os.Geteuid() == 0
	}
	has := func(c uint) bool { return data[c/32].Effective&(1<<(c%32)) != 0 }
	return has(unix.CAP_SYS_ADMIN) || has(unix.CAP_BPF)
}
