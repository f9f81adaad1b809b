package ebpf

//go:generate go tool bpf2go -cc clang-19 -cflags "-O2 -g -Wall -Werror -mcpu=v3" -target bpfel -type event -type event_kind -type syscall_id -type drop_reason -type ioctl_site -type call_site -type lib_id -type inband_word -type exit_tail_slot -type no_entry_mark -type limits -type api_limits -type open_flags -type statx_layout bpf ../../bpf/cudatrace.c -- -I../../bpf
//go:generate go tool bpf2go -cc clang-19 -cflags "-O2 -g -Wall -Werror -mcpu=v3 -DCUDATRACE_FENTRY" -target bpfel -no-global-types fentry ../../bpf/cudatrace.c -- -I../../bpf
//go:generate go tool bpf2go -cc clang-19 -cflags "-O2 -g -Wall -Werror -mcpu=v3 -DCUDATRACE_OLD_KERNEL" -target bpfel -no-global-types oldkernel ../../bpf/cudatrace.c -- -I../../bpf
