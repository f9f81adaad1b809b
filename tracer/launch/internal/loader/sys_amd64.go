package loader

// sysSeccomp is seccomp(2)'s number; syscall lacks it on amd64.
const sysSeccomp = 317
