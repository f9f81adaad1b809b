package loader

// sysSeccomp is seccomp(2)'s number.
const sysSeccomp = 277
