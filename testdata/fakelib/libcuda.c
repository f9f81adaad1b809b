// A stand-in libcuda.so.1 for tests: the entry points cudatrace probes,
// with CUDA's return codes, deciding them from real opens of device nodes.
// cuInit opens FAKELIB_CTL (default /dev/nvidiactl) and then FAKELIB_UVM
// (default /dev/nvidia-uvm): a failed control node gives 100
// (CUDA_ERROR_NO_DEVICE), a failed uvm 999 (CUDA_ERROR_UNKNOWN), as the
// real library does. With FAKELIB_IOCTL set, cuInit first issues libcuda's
// first ioctl on the control node (escape 0xd6, as recorded on the H200) and
// ignores its result (the stand-in node answers ENOTTY): a seccomp filter on
// NVIDIA ioctls then acts inside cuInit. Then it reserves 64 GiB of address
// space, as CUDA does: under RLIMIT_AS it returns 2 (CUDA_ERROR_OUT_OF_MEMORY).
// With FAKELIB_EVENTFD set, it then holds fds up to RLIMIT_NOFILE (a
// process that leaked its limit's worth) and makes the eventfd libcuda
// makes: EMFILE gives 304 (CUDA_ERROR_OPERATING_SYSTEM). Built by the tests
// with gcc; never installed.
#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <stdlib.h>
#include <unistd.h>

/* The driver's libcuda carries its version in this banner in .rodata; a
 * copy renamed libcuda.so.1 is known by it (cudatrace reads it). */
__attribute__((used)) static const char banner[] =
	"Version 575.57.08. Copyright (C) 2025 NVIDIA Corporation. All rights reserved.";

static int initialized;
static pid_t init_pid; /* CUDA's state belongs to the process that made it */
static int devices;

/* Initialised in this process: a fork's child inherits the flag but not
 * the driver's state, and gets CUDA_ERROR_NOT_INITIALIZED as with CUDA. */
static int ready(void)
{
	return initialized && getpid() == init_pid;
}

static const char *env_or(const char *name, const char *def)
{
	const char *v = getenv(name);
	return v && *v ? v : def;
}

int cuInit(unsigned int flags)
{
	(void)flags;
	if (initialized && !ready())
		return 3; /* CUDA_ERROR_NOT_INITIALIZED: a forked child */
	int ctl = open(env_or("FAKELIB_CTL", "/dev/nvidiactl"), O_RDWR | O_CLOEXEC);
	if (ctl < 0)
		return 100;
	if (getenv("FAKELIB_IOCTL")) {
		char params[8] = {0};
		(void)ioctl(ctl, 0xC00846D6UL, params);
	}
	/* CUDA_VISIBLE_DEVICES empty or negative hides every GPU. */
	const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
	if (cvd && (*cvd == 0 || *cvd == '-')) {
		close(ctl);
		return 100; /* CUDA_ERROR_NO_DEVICE */
	}
	int uvm = open(env_or("FAKELIB_UVM", "/dev/nvidia-uvm"), O_RDWR | O_CLOEXEC);
	if (uvm < 0) {
		close(ctl);
		return 999;
	}
	/* CUDA reserves a large virtual range for unified addressing: under
	 * RLIMIT_AS that fails and cuInit returns CUDA_ERROR_OUT_OF_MEMORY. */
	void *va = mmap(NULL, 64UL << 30, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (va == MAP_FAILED) {
		close(uvm);
		close(ctl);
		return 2;
	}
	if (getenv("FAKELIB_EVENTFD")) {
		while (dup(0) >= 0) /* to the limit: dup's EMFILE is not traced */
			;
		if (eventfd(0, EFD_CLOEXEC) < 0)
			return 304;
	}
	initialized = 1;
	init_pid = getpid();
	devices = atoi(env_or("FAKELIB_DEVICES", "1"));
	return 0;
}

int cuDeviceGetCount(int *count)
{
	if (!ready())
		return 3; /* CUDA_ERROR_NOT_INITIALIZED */
	*count = devices;
	return 0;
}

int cuDevicePrimaryCtxRetain(void **ctx, int dev)
{
	if (!ready())
		return 3;
	if (dev < 0 || dev >= devices)
		return 101; /* CUDA_ERROR_INVALID_DEVICE */
	*ctx = (void *)1;
	return 0;
}

/* Not probed by cudatrace: the shape of a program that reaches libcuda
 * only through entry points it does not watch. Returns
 * FAKELIB_DRIVER_RC (default 0), e.g. 34 as a stub library does. */
int cuDriverGetVersion(int *version)
{
	*version = 13000;
	return atoi(env_or("FAKELIB_DRIVER_RC", "0"));
}
