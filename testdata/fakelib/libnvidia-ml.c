// A stand-in libnvidia-ml.so.1 for tests: nvmlInit_v2 opens FAKELIB_CTL
// (default /dev/nvidiactl) and returns NVML_ERROR_DRIVER_NOT_LOADED (9)
// when it cannot, as NVML does.
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

int nvmlInit_v2(void)
{
	const char *p = getenv("FAKELIB_CTL");
	int fd = open(p && *p ? p : "/dev/nvidiactl", O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return 9;
	close(fd);
	return 0;
}
