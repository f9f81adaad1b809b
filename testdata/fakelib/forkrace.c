/* The fork-race target of tracer/ptrace's tests (runForkRace): a second
 * thread waits for a byte on the FIFO, then vforks and execs /bin/true and
 * waits for it, while the main thread opens the marker, the traced call at
 * which the test holds the tracer. The main thread opens it only once the
 * forker runs: a new thread starts in a ptrace stop, and one the tracer had
 * not resumed before being held never got to fork (the hang of issue 28:
 * "gave up waiting for the target's fork"). Plain threads: a Go helper's
 * runtime also makes threads and sends signals of its own.
 *
 *   forkrace FIFO MARKER   exit 0 once /bin/true ran, 1 otherwise */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

static int fifo;
static int ready[2]; /* the forker runs: it is past its first stop */
static int code = 1;

static void *forker(void *arg)
{
	(void)arg;
	char b = 1;
	if (write(ready[1], &b, 1) != 1) {
		perror("forkrace: write ready");
		return NULL;
	}
	if (read(fifo, &b, 1) != 1) {
		perror("forkrace: read fifo");
		return NULL;
	}
	pid_t pid = vfork();
	if (pid == 0) {
		execl("/bin/true", "true", (char *)NULL);
		_exit(127); /* ENOSYS when detached: the execve meets the filter alone */
	}
	if (pid < 0) {
		perror("forkrace: vfork");
		return NULL;
	}
	int st;
	if (waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0)
		code = 0;
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: forkrace FIFO MARKER\n");
		return 2;
	}
	fifo = open(argv[1], O_RDWR);
	if (fifo < 0) {
		perror("forkrace: open fifo");
		return 1;
	}
	pthread_t t;
	char b;
	if (pipe(ready) || pthread_create(&t, NULL, forker, NULL) || read(ready[0], &b, 1) != 1) {
		fprintf(stderr, "forkrace: the forker did not start\n");
		return 1;
	}
	open(argv[2], O_RDONLY); /* missing: the traced call the test holds at */
	pthread_join(t, NULL);
	return code;
}
