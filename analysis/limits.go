package analysis

import (
	"fmt"
	"strings"

	"github.com/cudatrace/cudatrace/nvdev"
)

// cuda codes a resource limit explains with every device call fine.
const (
	cudaOutOfMemory = 2
	cudaOSCall      = 304
)

// fdHeadroom is how close to RLIMIT_NOFILE the open fds must be, at the
// snapshot, for the limit to be the suspect of a failure no traced call
// shows (libcuda's eventfds, pipes and sockets are not traced).
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
		a.add(Finding{ID: "rlimit-as", Severity: SeverityError,
			Summary: fmt.Sprintf("RLIMIT_AS is %s: CUDA cannot reserve its virtual address space", bytesText(as[0])),
			Detail:  d,
			Fix:     "Remove the address-space limit for the job: `ulimit -v unlimited` in its shell, `LimitAS=infinity` in a systemd unit, no `as` entry in /etc/security/limits.conf; under Slurm, do not enforce virtual memory (VSizeFactor=0, no `--mem` enforcement through RLIMIT_AS). Limit resident memory with a cgroup (memory.max) instead.",
			Events:  []uint64{f.Seq}}, "")
	case (f.Ret == cudaOSCall || f.Ret == cudaDevUnavailable) && nofile != nil && nofile[0] != ^uint64(0) && p.OpenFDs+fdHeadroom >= int(min(nofile[0], 1<<30)):
		d := []string{head, fmt.Sprintf("RLIMIT_NOFILE is %s (soft) / %s (hard) (%s), and %d fds were open at the snapshot: the target was at its limit.", limitText(nofile[0]), limitText(nofile[1]), where, p.OpenFDs),
			"No traced /dev/nvidia* open failed, so the fd that could not be had is another of the driver's: an eventfd, pipe or socket libcuda makes (these calls are not traced), which fails with EMFILE. CUDA then reports 304 (CUDA_ERROR_OPERATING_SYSTEM) or 46 (PyTorch: cudaErrorDevicesUnavailable)."}
		a.add(Finding{ID: "fd-limit", Severity: SeverityError,
			Summary:  fmt.Sprintf("the process is at its open-file limit (RLIMIT_NOFILE %s)", limitText(nofile[0])),
			Detail:   d,
			Fix:      "Raise the limit for the job: `ulimit -n 65536` in its shell, `LimitNOFILE=` in a systemd unit, `--ulimit nofile=65536:65536` for Docker, or `lxc.prlimit.nofile` for LXC. CUDA opens several fds per GPU, besides the device nodes.",
			Inferred: true, Events: []uint64{f.Seq}}, "")
	}
}
