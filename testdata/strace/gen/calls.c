// calls makes the device-node syscalls libcuda makes, on a machine without
// NVIDIA devices (so they fail with ENOENT and change nothing), from a
// process, one of its threads and a child, so that gen.sh can record them
// with strace in each output format.
//
//   calls [exit|kill]   the child exits 3, or is killed by SIGKILL
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

static void *thread_main(void *arg) {
	(void)arg;
	// A second attempt from another thread, as the CUDA runtime makes.
	syscall(SYS_openat, AT_FDCWD, "/dev/nvidia0", O_RDWR | O_CLOEXEC);
	return 0;
}

int main(int argc, char **argv) {
	struct stat st;
	if (argc > 1 && strcmp(argv[1], "child") == 0) {
		syscall(SYS_openat, AT_FDCWD, "/dev/nvidia-uvm", O_RDWR | O_CLOEXEC);
		syscall(SYS_ioctl, -1, _IOC(_IOC_NONE, 0, 0x2, 0x3000), 0);
		if (argc > 2 && strcmp(argv[2], "kill") == 0)
			kill(getpid(), SIGKILL);
		_exit(3);
	}
	syscall(SYS_stat, "/dev/nvidiactl", &st);
	syscall(SYS_unlink, "/dev/char/nonexistent/195:255");
	syscall(SYS_symlink, "../nvidiactl", "/dev/char/nonexistent/195:255");
	syscall(SYS_mkdir, "/dev/nvidia-nonexistent/caps", 0755);
	syscall(SYS_mknodat, AT_FDCWD, "/dev/nvidia-nonexistent/nvidia-uvm", S_IFCHR | 0666, makedev(238, 0));
	syscall(SYS_openat, AT_FDCWD, "/dev/nvidiactl", O_RDWR);
	syscall(SYS_access, "/dev/nvidiactl", R_OK | W_OK);
	int fd = syscall(SYS_memfd_create, "cuda-jit", MFD_CLOEXEC);
	if (fd >= 0)
		close(fd);
	syscall(SYS_ioctl, -1, _IOC(_IOC_READ | _IOC_WRITE, 0x46, 0x2a, 0x20), 0);

	pthread_t t;
	pthread_create(&t, 0, thread_main, 0);
	pthread_join(t, 0);

	pid_t pid = fork();
	if (pid == 0) {
		// Run this binary again by its own name, which gen.sh makes
		// longer than a comm (15 bytes) to show the truncation.
		char self[4096] = {0};
		if (readlink("/proc/self/exe", self, sizeof self - 1) < 0)
			_exit(126);
		char *args[] = {"child", "child", argc > 1 ? argv[1] : "exit", 0};
		execv(self, args);
		_exit(127);
	}
	int status;
	waitpid(pid, &status, 0);
	return 5;
}
