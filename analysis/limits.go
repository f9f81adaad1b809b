package analysis

import (
	"fmt"
	"slices"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/cudatrace/cudatrace/nvdev"
	"github.com/cudatrace/cudatrace/nvdev/nvfile"
	"github.com/cudatrace/cudatrace/tracer"
)

// cuda codes a resource limit explains with every device call fine.
const (
	cudaOutOfMemory = 2
	cudaOSCall      = 304
)

// fdHeadroom is how close to RLIMIT_NOFILE the open fds must be, at the
// snapshot, for the limit to be the suspect of a failure no traced call
// shows (where libcuda's eventfds, pipes and sockets are not traced).
const fdHeadroom = 16

func bytesText(v uint64) string {
	if v == ^uint64(0) {
		return "unlimited"
	}
	switch {
	case v >= 1<<30 && v%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", v>>30)
	case v >= 1<<20 && v%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", v>>20)
	case v >= 1<<10 && v%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", v>>10)
	}
	return fmt.Sprintf("%d bytes", v)
}

// checkLimits explains a CUDA failure no traced call shows by the target's
// resource limits (/proc/PID/limits at the failure): RLIMIT_AS for
// CUDA_ERROR_OUT_OF_MEMORY (cuInit reserves large virtual ranges), and
// RLIMIT_NOFILE for 304/46 when the fd that ran out is not an NVIDIA open.
func (a *analyzer) checkLimits() {
	f := a.cudaFailed()
	if f == nil && a.fail < 0 && a.cuda.Status != "ok" {
		a.checkLimitsUncoded()
		return
	}
	if f == nil || a.fail >= 0 || !strings.HasPrefix(f.Func, "cu") {
		return
	}
	p := a.s.Process
	head := fmt.Sprintf("`%s()` by %s returned %d (%s), and no traced device call before it failed.", f.Func, nvdev.Caller(f), f.Ret, nvdev.ReturnName(f.Func, f.Ret))
	// The limits the kernel side read as the entry point returned are the
	// failure's own; /proc's, read after, may be its exec's or gone.
	as, nofile := p.AS, p.NoFile
	where := "/proc/PID/limits, at the failure"
	switch {
	case f.Limits != nil:
		as, nofile = &f.Limits.AS, &f.Limits.NoFile
		where = "read in the kernel as " + f.Func + " returned"
	case p.LimitsAtExec:
		where = "/proc/PID/limits, at its last exec; it had exited before the failure could be read"
	}
	switch {
	case f.Ret == cudaOutOfMemory && as != nil && as[0] != ^uint64(0):
		d := []string{head, fmt.Sprintf("RLIMIT_AS (`ulimit -v`) is %s (soft) / %s (hard) for the target (%s).", bytesText(as[0]), bytesText(as[1]), where),
			"CUDA reserves large virtual address ranges at initialisation (for unified addressing, far beyond the GPU's memory); under an address-space limit that mmap fails and CUDA reports 2 (CUDA_ERROR_OUT_OF_MEMORY), for cuInit and PyTorch alike."}
		events := []uint64{f.Seq}
		if c := a.limitFailure(unix.ENOMEM); c != nil {
			d = append(d, fmt.Sprintf("Traced: `%s` by %s %s.", nvdev.FormatCall(c), nvdev.Caller(c), nvdev.FormatResult(c)))
			events = []uint64{c.Seq, f.Seq}
		}
		a.add(Finding{ID: "rlimit-as", Severity: SeverityError,
			Summary: fmt.Sprintf("RLIMIT_AS is %s: CUDA cannot reserve its virtual address space", bytesText(as[0])),
			Detail:  d,
			Fix:     "Remove the address-space limit for the job: `ulimit -v unlimited` in its shell, `LimitAS=infinity` in a systemd unit, no `as` entry in /etc/security/limits.conf; under Slurm, do not enforce virtual memory (VSizeFactor=0, no `--mem` enforcement through RLIMIT_AS). Limit resident memory with a cgroup (memory.max) instead.",
			Events:  events}, "")
	case f.Ret == cudaOSCall || f.Ret == cudaDevUnavailable:
		a.checkFDLimit(f, head, nofile, where)
	}
}

// fdLimitFix is the fd-limit finding's fix.
const fdLimitFix = "Raise the limit for the job: `ulimit -n 65536` in its shell, `LimitNOFILE=` in a systemd unit, `--ulimit nofile=65536:65536` for Docker, or `lxc.prlimit.nofile` for LXC. CUDA opens several fds per GPU, besides the device nodes."

// checkFDLimit explains 304/46 by the fds: by the traced eventfd, pipe or
// socket call that failed EMFILE (the process's limit) or ENFILE (the
// system's) before it, else by the open fds near RLIMIT_NOFILE at the
// snapshot (inferred: the call itself was not seen).
func (a *analyzer) checkFDLimit(f *tracer.Event, head string, nofile *[2]uint64, where string) {
	p := a.s.Process
	limits := "RLIMIT_NOFILE was not read"
	if nofile != nil {
		limits = fmt.Sprintf("RLIMIT_NOFILE is %s (soft) / %s (hard) (%s)", limitText(nofile[0]), limitText(nofile[1]), where)
	}
	then := "CUDA then reports 304 (CUDA_ERROR_OPERATING_SYSTEM) or 46 (PyTorch: cudaErrorDevicesUnavailable)."
	if c := a.limitFailure(unix.EMFILE, unix.ENFILE); c != nil {
		call := fmt.Sprintf("`%s` by %s %s", nvdev.FormatCall(c), nvdev.Caller(c), nvdev.FormatResult(c))
		summary := fmt.Sprintf("%s failed with EMFILE: the process is at its open-file limit", c.Syscall)
		if nofile != nil {
			summary += fmt.Sprintf(" (RLIMIT_NOFILE %s)", limitText(nofile[0]))
		}
		why := "EMFILE: the process has as many fds open as RLIMIT_NOFILE allows."
		fix := fdLimitFix
		if c.Errno() == unix.ENFILE {
			summary = fmt.Sprintf("%s failed with ENFILE: the system's open-file table is full", c.Syscall)
			why = "ENFILE: the whole system has as many files open as fs.file-max allows, whatever this process's limit."
			fix = "Find what holds the host's files (`cat /proc/sys/fs/file-nr`) or raise `fs.file-max` (sysctl). " + fdLimitFix
		}
		d := []string{head, fmt.Sprintf("Before it, %s, an fd libcuda needs besides the device nodes. %s", call, why),
			fmt.Sprintf("%s; %d fds were open at the snapshot.", limits, p.OpenFDs), then}
		a.add(Finding{ID: "fd-limit", Severity: SeverityError, Summary: summary, Detail: d, Fix: fix,
			Events: []uint64{c.Seq, f.Seq}}, "")
		return
	}
	if nofile == nil || nofile[0] == ^uint64(0) || p.OpenFDs+fdHeadroom < int(min(nofile[0], 1<<30)) {
		return
	}
	d := []string{head, fmt.Sprintf("%s, and %d fds were open at the snapshot: the target was at its limit.", limits, p.OpenFDs),
		"No traced /dev/nvidia* open failed, so the fd that could not be had is another of the driver's: an eventfd, pipe or socket libcuda makes, which fails with EMFILE (no such failure was traced; watch on its fentry hook does not see these calls, nor does an strace log that left them out). " + then}
	a.add(Finding{ID: "fd-limit", Severity: SeverityError,
		Summary:  fmt.Sprintf("the process is at its open-file limit (RLIMIT_NOFILE %s)", limitText(nofile[0])),
		Detail:   d,
		Fix:      fdLimitFix,
		Inferred: true, Events: []uint64{f.Seq}}, "")
}

// limitFailure is the last call of the failing CUDA process, before CUDA
// failed, that a limit failed with one of errnos (KindLimit), or nil.
func (a *analyzer) limitFailure(errnos ...syscall.Errno) *tracer.Event {
	for i := a.cudaIdx - 1; i >= 0; i-- {
		e := &a.ev[i]
		if e.Kind == tracer.KindLimit && a.beforeCUDAFailure(i) && slices.Contains(errnos, e.Errno()) {
			return e
		}
	}
	return nil
}

// checkLimitsUncoded explains, where CUDA's own return code is unknown (an
// strace log, a trace whose probes missed it), a process that used the
// driver and then failed, with no device call failing, by a call a
// resource limit failed: an eventfd, pipe or socket libcuda makes
// (EMFILE, ENFILE), or its address-space reservation (mmap ENOMEM).
func (a *analyzer) checkLimitsUncoded() {
	for i := len(a.ev) - 1; i >= 0; i-- {
		c := &a.ev[i]
		if c.Kind != tracer.KindLimit || !a.usedDriver(c.PID, i) {
			continue
		}
		x := a.exitOf(c.PID, i)
		// A process that exited 0, or had not ended, may have got past it:
		// worth a warning, not the headline.
		sev := SeverityError
		ended := ""
		switch {
		case x != nil && x.ExitCode == 0 && x.Signal == 0:
			sev, ended = SeverityWarning, "then exited 0"
		case x == nil:
			sev, ended = SeverityWarning, "was still running when the trace ended"
		case x.Signal != 0:
			ended = "then died of " + unix.SignalName(syscall.Signal(x.Signal))
		default:
			ended = fmt.Sprintf("then exited %d", x.ExitCode)
		}
		p := a.s.Process
		call := fmt.Sprintf("`%s` by %s %s", nvdev.FormatCall(c), nvdev.Caller(c), nvdev.FormatResult(c))
		d := []string{fmt.Sprintf("%s after the process had used the NVIDIA driver; no device call failed, and it %s. CUDA's own return code was not traced.", call, ended)}
		events := []uint64{c.Seq}
		if x != nil {
			events = append(events, x.Seq)
		}
		if c.Errno() == unix.ENOMEM {
			limit := "Its RLIMIT_AS was not read."
			if p.AS != nil {
				limit = fmt.Sprintf("Its RLIMIT_AS (`ulimit -v`) is %s (soft) / %s (hard).", bytesText(p.AS[0]), bytesText(p.AS[1]))
			}
			d = append(d, "CUDA reserves large virtual address ranges at initialisation; an mmap that fails ENOMEM there is an address-space limit (RLIMIT_AS) or the kernel's overcommit policy refusing it, and CUDA reports 2 (CUDA_ERROR_OUT_OF_MEMORY). "+limit)
			a.add(Finding{ID: "rlimit-as", Severity: sev, Inferred: true,
				Summary: fmt.Sprintf("%s failed with ENOMEM in %s: CUDA could not reserve its address space", c.Syscall, nvdev.Caller(c)),
				Detail:  d,
				Fix:     "Remove the address-space limit for the job (`ulimit -v unlimited`, `LimitAS=infinity`, no `as` entry in /etc/security/limits.conf; under Slurm no RLIMIT_AS enforcement); if there is none, check `vm.overcommit_memory` (2 refuses CUDA's reservations). Limit resident memory with a cgroup (memory.max) instead.",
				Events:  events}, "")
			return
		}
		summary := fmt.Sprintf("%s failed with EMFILE in %s: the process is at its open-file limit", c.Syscall, nvdev.Caller(c))
		fix := fdLimitFix
		why := "EMFILE: the process has as many fds open as RLIMIT_NOFILE allows; libcuda needs eventfds, pipes and sockets besides the device nodes, and CUDA then reports 304 (CUDA_ERROR_OPERATING_SYSTEM) or 46 (PyTorch: cudaErrorDevicesUnavailable)."
		if c.Errno() == unix.ENFILE {
			summary = fmt.Sprintf("%s failed with ENFILE in %s: the system's open-file table is full", c.Syscall, nvdev.Caller(c))
			why = "ENFILE: the whole system has as many files open as fs.file-max allows, whatever this process's limit."
			fix = "Find what holds the host's files (`cat /proc/sys/fs/file-nr`) or raise `fs.file-max` (sysctl). " + fdLimitFix
		}
		d = append(d, why)
		if p.NoFile != nil {
			d = append(d, fmt.Sprintf("RLIMIT_NOFILE is %s (soft) / %s (hard).", limitText(p.NoFile[0]), limitText(p.NoFile[1])))
		}
		a.add(Finding{ID: "fd-limit", Severity: sev, Inferred: true, Summary: summary, Detail: d, Fix: fix, Events: events}, "")
		return
	}
}

// usedDriver reports whether process pid opened an NVIDIA device node or
// the CUDA/NVML library before event i.
func (a *analyzer) usedDriver(pid, i int) bool {
	for j := 0; j < i; j++ {
		e := &a.ev[j]
		if e.PID == pid && e.Kind == tracer.KindOpen && !e.Failed() && (isNvidiaNode(e.Path) || nvfile.IsLibrary(e.Path)) {
			return true
		}
	}
	return false
}
