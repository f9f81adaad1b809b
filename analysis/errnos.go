package analysis

import (
	"fmt"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/cudatrace/cudatrace/nvdev"
	"github.com/cudatrace/cudatrace/tracer"
)

// targetFilters is how many seccomp filters are the target's own (the
// ptrace backend's filter is not), and whether that is known.
func (a *analyzer) targetFilters() (int, bool) {
	p := a.s.Process
	read := p.Comm != "" // its status was read (not gone before the snapshot)
	if !read || p.Seccomp != 2 {
		return 0, read
	}
	if p.SeccompFilters == 0 {
		// Kernel too old to count them: one or more, not ours alone.
		return 1, a.facts.OwnSeccompFilters == 0
	}
	n := p.SeccompFilters - a.facts.OwnSeccompFilters
	return n, true
}

// filterInstalled names the traced seccomp call that installed a filter
// call i runs under ("A seccomp filter was installed by ..."), and returns
// it; nil when the trace did not see one.
func (a *analyzer) filterInstalled(i int) (string, *tracer.Event) {
	j, same := SeccompFilterBefore(a.ev, i)
	if j < 0 {
		return "", nil
	}
	f := &a.ev[j]
	by := "by " + nvdev.Caller(f)
	if !same {
		by += ", a process before it in the traced tree"
	}
	return fmt.Sprintf("A seccomp filter was installed %s at +%.3fs: `%s`.", by, f.Time.Seconds(), nvdev.SeccompCall(f.Syscall, f)), f
}

// seccompFix says where a seccomp rule lives for the runtime in use.
func (a *analyzer) seccompFix(syscall string) string {
	switch nvdev.RuntimeKind(a.s) {
	case "docker":
		return fmt.Sprintf("Allow %s in the container's seccomp profile (`--security-opt seccomp=/path/to/profile.json`); `--security-opt seccomp=unconfined` confirms the diagnosis.", syscall)
	case "kubernetes":
		return fmt.Sprintf("The pod's seccomp profile refuses %s: use `securityContext.seccompProfile: {type: RuntimeDefault}` or a Localhost profile that allows it.", syscall)
	case "systemd":
		return fmt.Sprintf("The unit's `SystemCallFilter=` refuses %s: add it (`SystemCallFilter=%s`), then `systemctl daemon-reload` and restart the unit.", syscall, syscall)
	case "lxc":
		return fmt.Sprintf("The container's `lxc.seccomp.profile` refuses %s: allow it there, then restart the container.", syscall)
	}
	return fmt.Sprintf("Allow %s in the seccomp filter the target runs under: Docker/podman `--security-opt seccomp=PROFILE`, Kubernetes `securityContext.seccompProfile`, systemd `SystemCallFilter=`, or the sandbox that installs it.", syscall)
}

// seccompDenied explains a call a seccomp filter answered before the kernel
// ran it (its entry was never seen), or one whose EPERM only seccomp gives.
func (a *analyzer) seccompDenied(i int, inferred bool) {
	e := &a.ev[i]
	d := []string{nvdev.CallLine(e)}
	if e.NoEntry {
		d = append(d, "The call never reached the kernel's syscall code: a seccomp filter answered it with "+e.ErrnoName()+".")
	}
	cause := fmt.Sprintf("a seccomp filter refused it (%s)", e.ErrnoName())
	if line, f := a.filterInstalled(i); f != nil {
		d = append(d, line)
		cause = fmt.Sprintf("refused by the seccomp filter %s[%d] installed at +%.3fs", f.Comm, f.PID, f.Time.Seconds())
		if f.Flags&seccompFlagNewListener != 0 {
			d = append(d, "The filter has a listener (SECCOMP_RET_USER_NOTIF): a user-space supervisor answered the call.")
			cause += ", answered by its user-space supervisor"
		}
		inferred = false
	}
	n, known := a.targetFilters()
	switch {
	case known && n > 0:
		d = append(d, fmt.Sprintf("The target runs under %d seccomp filter(s) of its own (Seccomp: 2, /proc/PID/status).", n))
	case known:
		d = append(d, "The target's own seccomp state shows no filter; one in a parent sandbox, or one installed and inherited before the snapshot, is still the likely cause.")
	default:
		d = append(d, "The target's seccomp state is unknown (it exited, or this is a log): check with `grep Seccomp /proc/PID/status` while it runs. An LSM (AppArmor/SELinux) can refuse ioctls too; the kernel log shows its denials.")
	}
	a.add(Finding{ID: "seccomp-denied", Severity: SeverityError,
		Summary:  fmt.Sprintf("a seccomp filter refuses %s", e.Syscall),
		Detail:   d,
		Fix:      a.seccompFix(e.Syscall),
		Inferred: inferred, Events: []uint64{e.Seq}}, cause)
}

// explainOtherErrno covers the errnos of a device open or ioctl that have no
// rule of their own: each still names its usual cause and a fix.
func (a *analyzer) explainOtherErrno(i int) {
	e := &a.ev[i]
	d, events := a.callEvidence(i)
	var id, summary, fix, cause string
	switch e.Errno() {
	case unix.EMFILE, unix.ENFILE:
		id, cause = "fd-limit", "out of file descriptors"
		p := a.s.Process
		if e.Errno() == unix.EMFILE {
			summary = "the process hit its open-file limit (RLIMIT_NOFILE)"
			if p.NoFile != nil {
				d = append(d, fmt.Sprintf("RLIMIT_NOFILE is %s (soft) / %s (hard); %d fds were open at the snapshot.", limitText(p.NoFile[0]), limitText(p.NoFile[1]), p.OpenFDs))
			}
			fix = "Raise the limit for the job: `ulimit -n 65536` in its shell, `LimitNOFILE=` in a systemd unit, `--ulimit nofile=65536:65536` for Docker, or `lxc.prlimit.nofile` for LXC. CUDA opens several fds per GPU."
		} else {
			summary = "the system ran out of open files (ENFILE, fs.file-max)"
			fix = "Raise `sysctl fs.file-max`, or find the process holding the most fds (`ls /proc/*/fd | wc -l`)."
		}
	case unix.EISDIR, unix.ENOTDIR, unix.ELOOP:
		id, cause = "node-not-chardev", "the path is not a character device"
		summary = fmt.Sprintf("%s is not a character device node", e.Path)
		d = append(d, fmt.Sprintf("%s means a directory or symlink stands where the device node should be (often a bind mount of a missing host node, made as a directory).", e.ErrnoName()))
		fix = fmt.Sprintf("Remove what is at %s and bind-mount or create the real node (`nvidia-modprobe -c=0`, or `--device %s`).", e.Path, e.Path)
	case unix.ENOTTY:
		id, cause = "wrong-driver", "the node belongs to another driver"
		summary = fmt.Sprintf("the driver behind fd %d does not know NVIDIA's ioctls (ENOTTY)", e.FD)
		fix = "Recreate the node with the NVIDIA driver's current major (`nvidia-modprobe -c=0 -u`), or bind-mount the host's node."
		if e.Dev != nil {
			owner := a.s.MajorName(e.Dev.Major)
			if owner == "" {
				owner = "no driver"
			}
			node := a.pathOfFD(i)
			if node == "" {
				node = fmt.Sprintf("fd %d", e.FD)
			}
			d = append(d, fmt.Sprintf("%s is c %d:%d, a node of %s (/proc/devices), not of an NVIDIA driver: its open succeeded, but that driver does not know NVIDIA's ioctls.", node, e.Dev.Major, e.Dev.Minor, owner))
			if a.foreignNode(e) {
				summary = fmt.Sprintf("%s is c %d:%d, a node of %s, not NVIDIA's", node, e.Dev.Major, e.Dev.Minor, owner)
				cause = fmt.Sprintf("%s is a node of %s (major %d), not NVIDIA's", node, owner, e.Dev.Major)
				if want := nvidiaNodeMajor(a, node); want != "" {
					d = append(d, want)
				}
				fix = fmt.Sprintf("Put the real node at %s: find what is mounted there (`findmnt %s`; a bind mount of another device) and remove it, then bind-mount the host's %s or create it (`nvidia-modprobe -c=0 -u`).", node, node, node)
			}
		}
	case unix.EPERM, unix.EACCES:
		if e.Kind == tracer.KindIoctl {
			if n, known := a.targetFilters(); !known || n > 0 {
				a.seccompDenied(i, true)
				return
			}
			id, cause = "ioctl-denied", "the ioctl was refused"
			summary = fmt.Sprintf("%s was refused with %s", nvdev.FormatCall(e), e.ErrnoName())
			d = append(d, "The driver refuses RM requests the caller may not make (a privileged control call, or another client's object); an LSM (AppArmor/SELinux) can also refuse ioctls.")
			fix = "Check the kernel log for an LSM denial; run the same as root to tell a privilege check from a policy."
		}
	case unix.ENOMEM:
		id, cause = "kernel-no-memory", "the kernel ran out of memory"
		summary = fmt.Sprintf("%s failed with ENOMEM", nvdev.FormatCall(e))
		d = append(d, "The driver could not allocate kernel memory. RLIMIT_MEMLOCK is not the cause: "+nvdev.PinnedMemoryUncharged+".")
		fix = "Check the memory cgroup limit (memory.max) and `dmesg` for allocation failures."
	case unix.EAGAIN, unix.EINTR:
		id, cause = "call-interrupted", "the call was interrupted and not retried"
		summary = fmt.Sprintf("%s failed with %s and was not retried", nvdev.FormatCall(e), e.ErrnoName())
		d = append(d, "A signal or a non-blocking open interrupted the call; libcuda did not try again.")
		fix = "Look for a signal storm (a profiler's timer, SIGCHLD from many children) during initialisation, or a GPU still opening in the background."
	case unix.EINVAL:
		id, cause = "call-invalid", "the driver rejected the call's arguments"
		summary = fmt.Sprintf("%s failed with EINVAL", nvdev.FormatCall(e))
		d = append(d, "The driver rejected the arguments: a libcuda of another driver version sends params this module does not accept.")
		fix = "Make libcuda and the kernel module the same driver version (reboot or reload the module after an upgrade)."
	}
	if id == "" {
		return
	}
	a.add(Finding{ID: id, Severity: SeverityError, Summary: summary, Detail: d, Fix: fix, Events: events}, cause)
}

func limitText(v uint64) string {
	if v == ^uint64(0) {
		return "unlimited"
	}
	return fmt.Sprint(v)
}

// pathOfFD is the path the process of ioctl i opened its fd from (the last
// successful open that returned it before i), or "".
func (a *analyzer) pathOfFD(i int) string {
	e := &a.ev[i]
	for j := i - 1; j >= 0; j-- {
		o := &a.ev[j]
		if o.PID == e.PID && o.Kind == tracer.KindOpen && !o.Failed() && o.Ret == int64(e.FD) {
			return o.Path
		}
	}
	return ""
}

// foreignNode is whether ioctl e's fd is a character device whose major no
// NVIDIA driver holds (/proc/devices read): another driver's node at an
// NVIDIA path, whose ENOTTY is the cause, not a UVM or HMM problem.
func (a *analyzer) foreignNode(e *tracer.Event) bool {
	if e.Dev == nil || len(a.s.ProcDevices) == 0 {
		return false
	}
	for _, m := range a.s.ProcDevices {
		if m.Major == e.Dev.Major && strings.HasPrefix(m.Name, "nvidia") {
			return false
		}
	}
	return true
}

// nvidiaNodeMajor says which major the node at path should have, "" when
// unknown.
func nvidiaNodeMajor(a *analyzer, path string) string {
	f := factsFor(a.s, nil, 0, nil, path)
	if !f.expOK || !f.regOK {
		return ""
	}
	return fmt.Sprintf("%s should be a node of %s, major %d (/proc/devices).", path, f.regName, f.regMajor)
}
