// storm N PATH [SECONDS]: a fork storm for cudatrace watch (issue 32
// item 4). Forks N short children, at most 64 alive at once; each opens
// PATH (an NVIDIA path: watch follows it from that open) and exits at
// once, without an exec. With SECONDS the forks are paced to spread over
// that long. A PATH that does not exist (/dev/nvidiactl on a host without
// the driver) makes every child a failure, one diagnosis each; an
// NVIDIA-named node that opens makes every child healthy.
//
// Prints one line per child as it is reaped: "PID UNIX_NS" (the reap
// time, a few microseconds after its exit), for the driver's lag figures.
//
//	cc -O2 -o storm scripts/bench/storm.c
//	./storm 10000 /dev/nvidiactl > exits.txt
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static long long now_ns(void) {
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static long long mono_ns(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

// reap waits for one child and prints its PID and the time.
static void reap(void) {
	int st;
	pid_t pid = waitpid(-1, &st, 0);
	if (pid > 0)
		printf("%d %lld\n", (int)pid, now_ns());
}

int main(int argc, char **argv) {
	if (argc < 3) {
		fprintf(stderr, "usage: storm N PATH [SECONDS]\n");
		return 2;
	}
	long n = atol(argv[1]);
	const char *path = argv[2];
	double secs = argc > 3 ? atof(argv[3]) : 0;
	long long start = mono_ns();
	int alive = 0;
	for (long i = 0; i < n; i++) {
		if (secs > 0) {
			long long due = start + (long long)(secs * 1e9 * i / n);
			long long d;
			while ((d = due - mono_ns()) > 0) {
				struct timespec ts = {d / 1000000000LL, d % 1000000000LL};
				nanosleep(&ts, NULL);
			}
		}
		while (alive >= 64) {
			reap();
			alive--;
		}
		pid_t pid = fork();
		if (pid < 0) {
			perror("fork");
			return 1;
		}
		if (pid == 0) {
			int fd = open(path, O_RDWR | O_CLOEXEC);
			_exit(fd < 0 ? 1 : 0);
		}
		alive++;
	}
	while (alive-- > 0)
		reap();
	fprintf(stderr, "storm: %ld children in %.2f s\n", n, (mono_ns() - start) / 1e9);
	return 0;
}
