// A CUDA application in miniature: dlopen libcuda (LIB, default
// "libcuda.so.1", found as the dynamic loader finds it), cuInit, then
// cuDeviceGetCount and cuDevicePrimaryCtxRetain when it succeeded, printing
// "cuInit N" and "count N" like the python one-liners of the GPU runs.
// With FAKELIB_WAIT set it reads a line from stdin before cuInit (attach
// tests attach meanwhile); with FAKELIB_NVML set it also calls nvmlInit_v2
// from libnvidia-ml.so.1. With FAKELIB_FORK set it forks after a successful
// cuInit and the child calls cuDeviceGetCount, as a multiprocessing worker
// started with fork does; the app exits with the child's status (1 when
// CUDA failed there). With FAKELIB_UNPROBED set it calls only
// cuDriverGetVersion (an entry point cudatrace does not probe) and exits 1
// when that fails. With FAKELIB_THREAD=worker, cuInit runs on a second
// thread the main thread joins; with FAKELIB_THREAD=main, the main thread
// calls it while a second thread joins the main one. A thread killed
// inside cuInit (seccomp KILL_THREAD) leaves the process running: the
// joining thread says so and exits 1. With FAKELIB_STRICT set it exits 1
// when cuInit failed, as a job that stops on the error does.
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int (*cu_init)(unsigned);
static int thread_rc = -1;

static void *init_thread(void *arg)
{
	(void)arg;
	thread_rc = cu_init(0);
	return 0;
}

static void *watch_main(void *arg)
{
	pthread_join(*(pthread_t *)arg, 0);
	printf("cuInit thread died\n");
	fflush(stdout);
	_exit(1);
}

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
	if (getenv("FAKELIB_UNPROBED")) {
		int (*get_version)(int *) = (int (*)(int *))dlsym(h, "cuDriverGetVersion");
		int v = 0, rc = get_version(&v);
		printf("cuDriverGetVersion %d\n", rc);
		return rc == 0 ? 0 : 1;
	}
	cu_init = (int (*)(unsigned))dlsym(h, "cuInit");
	int (*get_count)(int *) = (int (*)(int *))dlsym(h, "cuDeviceGetCount");
	int (*retain)(void **, int) = (int (*)(void **, int))dlsym(h, "cuDevicePrimaryCtxRetain");
	if (getenv("FAKELIB_WAIT")) {
		char line[16];
		if (!fgets(line, sizeof(line), stdin))
			return 1;
	}
	const char *mode = getenv("FAKELIB_THREAD");
	int worker = mode && !strcmp(mode, "worker");
	if (worker) {
		pthread_t th;
		if (pthread_create(&th, 0, init_thread, 0) || pthread_join(th, 0))
			return 1;
		if (thread_rc < 0) {
			printf("cuInit thread died\n");
			return 1;
		}
	} else if (mode && !strcmp(mode, "main")) {
		static pthread_t self, th;
		self = pthread_self();
		if (pthread_create(&th, 0, watch_main, &self))
			return 1;
	}
	int rc = worker ? thread_rc : cu_init(0);
	printf("cuInit %d\n", rc);
	if (rc == 0 && getenv("FAKELIB_FORK")) {
		fflush(stdout);
		pid_t child = fork();
		if (child == 0) {
			int n = -1;
			int crc = get_count(&n);
			printf("child cuDeviceGetCount %d\n", crc);
			fflush(stdout);
			_exit(crc == 0 ? 0 : 1);
		}
		int st = 0;
		if (child < 0 || waitpid(child, &st, 0) < 0)
			return 1;
		return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
	}
	if (rc == 0) {
		int n = -1;
		int crc = get_count(&n);
		printf("cuDeviceGetCount %d count %d\n", crc, n);
		void *ctx = 0;
		printf("cuDevicePrimaryCtxRetain %d\n", retain(&ctx, 0));
	}
	fflush(stdout);
	return rc != 0 && getenv("FAKELIB_STRICT") ? 1 : 0;
}
