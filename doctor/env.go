package doctor

import (
	"fmt"
	"strings"

	"github.com/cudatrace/cudatrace/nvdev"
)

// checkEnvironment: what in the subject's environment steers CUDA away
// from the GPUs.
func checkEnvironment(h *host) []Check {
	var out []Check
	add := func(c Check) { c.Category = CatEnvironment; out = append(out, c) }
	env := h.b.Env

	cvd := Check{ID: "cuda-visible-devices", Subject: "CUDA_VISIBLE_DEVICES", Status: Pass}
	if v, ok := env["CUDA_VISIBLE_DEVICES"]; !ok {
		cvd.Summary = "unset: every GPU is visible"
	} else if nvdev.VisibleDevicesHidesAll(v, len(h.sv.GPUs)) {
		cvd.Status = Fail
		cvd.Summary = fmt.Sprintf("%q hides every GPU: cuInit returns 100 (CUDA_ERROR_NO_DEVICE)", v)
		cvd.Detail = []string{fmt.Sprintf("The driver sees %s; CUDA stops at the first entry that is not a valid 0-based index or GPU/MIG UUID.", plural(len(h.sv.GPUs), "GPU", "GPUs"))}
		cvd.Fix = "Unset CUDA_VISIBLE_DEVICES, or set it to valid indices or UUIDs from `nvidia-smi -L`."
	} else {
		cvd.Summary = fmt.Sprintf("%q", v)
	}
	add(cvd)

	nvd := Check{ID: "nvidia-visible-devices", Subject: "NVIDIA_VISIBLE_DEVICES", Status: Pass}
	switch v, ok := env["NVIDIA_VISIBLE_DEVICES"]; {
	case !ok:
		nvd.Summary = "unset"
	case v == "void" || v == "none" || strings.TrimSpace(v) == "":
		nvd.Status = Warn
		nvd.Summary = fmt.Sprintf("%q: the NVIDIA Container Toolkit gives a container started with this environment no GPU", v)
		nvd.Fix = "Set NVIDIA_VISIBLE_DEVICES=all (or GPU indices/UUIDs) in the image or the container's environment, or request GPUs with `--gpus` or CDI."
	default:
		nvd.Summary = fmt.Sprintf("%q", v)
	}
	add(nvd)

	for _, l := range h.sv.Libraries {
		if l.Name != "libcuda.so.1" {
			continue
		}
		c := Check{ID: "libcuda", Subject: "libcuda.so.1", Status: Pass}
		kind := nvdev.LibcudaKind(l.Path)
		if l.Stub {
			kind = "stub"
		}
		switch {
		case l.Path == "" && !h.b.Driver.Loaded:
			c.Status, c.Summary = Skip, "not found, and no driver is loaded either"
		case l.Path == "":
			c.Status = Fail
			c.Summary = "the loader finds no libcuda.so.1 (LD_LIBRARY_PATH, ld.so.cache, /lib, /usr/lib): CUDA reports that no driver is installed (cudaErrorInsufficientDriver, 35)"
			c.Fix = "Install the driver's user-space libraries (the libcuda1/nvidia-driver-libs package of version " + orDash(h.b.Host.DriverVersion) + ") and run `ldconfig`; in a container, start it with `--gpus all` (NVIDIA_DRIVER_CAPABILITIES including compute) or CDI so the host's libcuda is mounted."
		case kind == "stub":
			c.Status = Fail
			c.Summary = "the loader takes the CUDA toolkit's stub first: " + l.Path + " (via " + l.Via + "): cuInit returns 34 (CUDA_ERROR_STUB_LIBRARY)"
			c.Fix = "Remove the toolkit's lib64/stubs directory from LD_LIBRARY_PATH (and from ld.so.conf / rpath) so the driver's libcuda.so.1 is found."
		case kind == "compat":
			c.Status = Warn
			c.Summary = "the loader takes a forward-compatibility libcuda first: " + l.Path + " (via " + l.Via + ")"
			c.Detail = []string{"cuda-compat works only on data-center GPUs and a supported driver branch; elsewhere cuInit fails with 804 (CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE)."}
			c.Fix = "If CUDA reports 804 or a driver mismatch, remove the compat directory from LD_LIBRARY_PATH / ld.so.conf, or upgrade the host driver so compat is not needed."
		default:
			c.Summary = fmt.Sprintf("%s (via %s)", l.Path, l.Via)
			if l.Resolved != "" && l.Resolved != l.Path {
				c.Summary += " → " + l.Resolved
			}
		}
		if len(l.Shadowed) > 0 {
			c.Detail = append(c.Detail, "Further copies the loader would not take: "+strings.Join(l.Shadowed, ", "))
		}
		add(c)
	}

	sc := Check{ID: "seccomp", Subject: "seccomp", Status: Pass}
	switch p := h.b.Process; {
	case p.Seccomp == 0:
		sc.Summary = "no seccomp filter on " + h.sv.Subject
	case p.Seccomp == 1:
		sc.Status = Fail
		sc.Summary = "strict seccomp mode: only read, write, exit and sigreturn are allowed; CUDA cannot run"
	case !h.sv.MemfdProbed:
		sc.Status = Skip
		sc.Summary = "a seccomp filter is on " + h.sv.Subject + "; only this process can be probed, so whether it refuses memfd_create is unknown"
	case h.sv.MemfdError != "":
		sc.Status = Fail
		sc.Summary = "a seccomp filter refuses memfd_create (" + h.sv.MemfdError + "): CUDA fails with 304 (cudaErrorOperatingSystem)"
		sc.Fix = "Allow memfd_create in the container's seccomp profile (Docker: a custom --security-opt seccomp=PROFILE; `seccomp=unconfined` only to confirm the diagnosis)."
	default:
		sc.Summary = "a seccomp filter is on, and it allows memfd_create (the call CUDA needs that filters refuse)"
	}
	add(sc)
	return out
}
