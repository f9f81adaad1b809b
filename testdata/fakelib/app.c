// A CUDA application in miniature: dlopen libcuda (LIB, default
// "libcuda.so.1", found as the dynamic loader finds it), cuInit, then
// cuDeviceGetCount and cuDevicePrimaryCtxRetain when it succeeded, printing
// "cuInit N" and "count N" like the python one-liners of the GPU runs.
// With FAKELIB_WAIT set it reads a line from stdin before cuInit (attach
// tests attach meanwhile); with FAKELIB_NVML set it also calls nvmlInit_v2
// from libnvidia-ml.so.1.
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
	const char *lib = argc > 1 ? argv[1] : "libcuda.so.1";
	if (getenv("FAKELIB_NVML")) {
		void *ml = dlopen("libnvidia-ml.so.1", RTLD_NOW);
		if (!ml) {
			fprintf(stderr, "%s\n", dlerror());
			return 1;
		}
		int (*nvml_init)(void) = (int (*)(void))dlsym(ml, "nvmlInit_v2");
		printf("nvmlInit_v2 %d\n", nvml_init());
	}
	void *h = dlopen(lib, RTLD_NOW);
	if (!h) {
		fprintf(stderr, "%s\n", dlerror());
		return 1;
	}
	int (*cu_init)(unsigned) = (int (*)(unsigned))dlsym(h, "cuInit");
	int (*get_count)(int *) = (int (*)(int *))dlsym(h, "cuDeviceGetCount");
	int (*retain)(void **, int) = (int (*)(void **, int))dlsym(h, "cuDevicePrimaryCtxRetain");
	if (getenv("FAKELIB_WAIT")) {
		char line[16];
		if (!fgets(line, sizeof(line), stdin))
			return 1;
	}
	int rc = cu_init(0);
	printf("cuInit %d\n", rc);
	if (rc == 0) {
		int n = -1;
		int crc = get_count(&n);
		printf("cuDeviceGetCount %d count %d\n", crc, n);
		void *ctx = 0;
		printf("cuDevicePrimaryCtxRetain %d\n", retain(&ctx, 0));
	}
	fflush(stdout);
	return 0;
}
