package ebpftrace

//go:generate go tool bpf2go -cc clang-19 -cflags "-O2 -g -Wall -Werror" -target bpfel -type event -type event_kind -type syscall_id -type drop_reason bpf ../../bpf/cudatrace.c -- -I../../bpf
