#!/usr/bin/env bash
# The kernel matrix (make test-kernels): boots Debian's stock cloud kernels
# (bullseye 5.10, bookworm 6.1, trixie 6.12) in qemu under TCG, from an
# initramfs holding busybox, the project's static test binaries and the
# scenario tools, and runs the e2e scenarios of both backends in each:
# cgroup v2 device programs, fake nodes, seccomp, attach, CUDA's return
# codes (uprobes) and watch. A failure names the kernel. The host's own
# kernel is the normal suite's (make test).
#   usage: scripts/test-kernels.sh [SUITE...]      (default: all three)
# CUDATRACE_KERNEL_CACHE: where the kernels are kept (CI caches it);
#   default $XDG_CACHE_HOME/cudatrace/kernels, else .cache/kernels here.
# KTEST_PLAN: a file of "PKG REGEX" lines to run instead of the default.
# Needs qemu-system-x86, cpio, busybox-static, gcc and Go.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
GO=${GO:-go}
suites=("$@")
[ ${#suites[@]} -gt 0 ] || suites=(bullseye bookworm trixie)
if [ -n "${CUDATRACE_KERNEL_CACHE:-}" ]; then cache=$CUDATRACE_KERNEL_CACHE
elif [ -n "${XDG_CACHE_HOME:-}" ]; then cache=$XDG_CACHE_HOME/cudatrace/kernels
else cache=$root/.cache/kernels; fi
for tool in qemu-system-x86_64 cpio busybox gcc; do
  command -v "$tool" >/dev/null || { echo "test-kernels: needs $tool (apt-get install qemu-system-x86 cpio busybox-static gcc)" >&2; exit 2; }
done
start=$SECONDS
scripts/kernels/fetch.sh "$cache" "${suites[@]}"

work=$(mktemp -d /tmp/cudatrace-kernels.XXXXXX)
trap 'rm -rf "$work"' EXIT
ir=$work/root
mkdir -p "$ir"/{etc,proc,sys,dev,tmp,run,root,t/bin/fakelib}

# The plan: "SUITES PKG REGEX" lines, SUITES a comma list or "all": the
# test binary (package) and its -test.run filter. Each e2e scenario runs
# under both backends (bothBackends, or a subtest per backend). Bullseye's
# 5.10 loads the object for older kernels (docs/kernels.md), with no fentry
# hook. It runs no TestSeccompKillsThreadOfMany (no SECCOMP_MODE_DEAD before
# 5.17) and no TestSeccompKillsIoctl (its KILL_PROCESS and KILL_THREAD cases
# fail there under both backends). Each eBPF load takes ~15-20 s under TCG
# on 5.10, so its tracer/ebpf set leaves out what the e2e scenarios cover
# (attach, uprobes, watch), and its boot may take 30 min (timeout below).
# TestOldKernelObject runs that object on the host's kernel (make test).
plan=$work/plan
if [ -n "${KTEST_PLAN:-}" ]; then cp "$KTEST_PLAN" "$plan"; else cat >"$plan" <<'PLAN'
bookworm,trixie tracer/ebpf ^(TestEveryProgramLoads|TestProbe|TestFentryProbe|TestHooksSeeTheSameCalls|TestFentryAttachFailureFallsBack|TestOpenIoctlAndFailures|TestFdWalkWithoutRdonlyCast|TestScansWithoutBpfLoop|TestHostWideFollowsNVIDIAOpeners|TestHostWideFollowsColdPathOpen|TestLaunchedTargetLibraryProbed|TestInbandFailureNotFolded|TestAttach|TestNothingLeftBehind)$
bookworm,trixie tracer/ptrace ^(TestLaunchDeviceCalls|TestSeccompFilter|TestLaunchAPIReturns|TestAttachAPIReturns)$
bullseye tracer/ebpf ^(TestEveryProgramLoads|TestProbe|TestKernelVariants|TestOpenIoctlAndFailures|TestInbandFailureNotFolded|TestNothingLeftBehind)$
bullseye tracer/ptrace ^(TestLaunchDeviceCalls|TestSeccompFilter|TestLaunchProcessTree|TestAttachShellLoop|TestLaunchAPIReturns|TestAttachAPIReturns)$
bookworm,trixie cmd/cudatrace ^(TestHealthy|TestVisibleDevicesHideAll|TestCgroup2DeniesUVM|TestCgroup2DenyFromAbove|TestNodeStaleMajor|TestNodeMissingUnprivileged|TestNodeRepairedByRoot|TestSeccompRefusedIoctl|TestSeccompKillsIoctl|TestSeccompKillsThreadOfMany|TestAddressSpaceLimit|TestCUDAReturnCodeDenyUVM|TestCUDALibraryOpenedFromElsewhere|TestAttach|TestWatchScenarios|TestWatchCgroupFilter|TestWatchGoneProcess|TestWatchVerboseHealthyCUDA)$
bullseye cmd/cudatrace ^(TestHealthy|TestVisibleDevicesHideAll|TestCgroup2DeniesUVM|TestCgroup2DenyFromAbove|TestNodeStaleMajor|TestNodeMissingUnprivileged|TestNodeRepairedByRoot|TestSeccompRefusedIoctl|TestAddressSpaceLimit|TestCUDAReturnCodeDenyUVM|TestCUDALibraryOpenedFromElsewhere|TestAttach|TestWatchScenarios|TestWatchCgroupFilter|TestWatchGoneProcess|TestWatchVerboseHealthyCUDA)$
PLAN
fi
cp "$plan" "$ir/t/plan"

# Static binaries: the tools the scenarios run, and the test binaries.
export CGO_ENABLED=0
"$GO" build -trimpath -o "$ir/t/bin/cudatrace" ./cmd/cudatrace
"$GO" build -trimpath -o "$ir/t/bin/fakecuda" ./testdata/fakecuda
"$GO" build -trimpath -o "$ir/t/bin/faultexec" ./internal/scenario/faults/faultexec
for pkg in $(awk 'NF {print $2}' "$plan" | sort -u); do
  mkdir -p "$ir/t/$pkg"
  # Named as go test names it: tests check their own comm.
  "$GO" test -c -trimpath -o "$ir/t/$pkg/$(basename "$pkg").test" "./$pkg"
  if [ -d "$pkg/testdata" ]; then cp -a "$pkg/testdata" "$ir/t/$pkg/"; fi
done
cp -a testdata "$ir/t/"
# testdata/fakelib: the stand-in libcuda and NVML, and the app that dlopens them.
fl=$ir/t/bin/fakelib
gcc -shared -fPIC -O1 -o "$fl/libcuda.so.1" testdata/fakelib/libcuda.c
gcc -shared -fPIC -O1 -o "$fl/libnvidia-ml.so.1" testdata/fakelib/libnvidia-ml.c
gcc -O1 -o "$fl/app" testdata/fakelib/app.c -ldl
gcc -O1 -o "$fl/forkrace" testdata/fakelib/forkrace.c -pthread

# The host's own tools where the tests name them (coreutils, dash, bash,
# util-linux's unshare, setpriv and mount with their long options), with
# their libraries, in a merged /usr as Debian has it; busybox-static for the
# rest (poweroff, ip, hostname).
mkdir -p "$ir/usr/bin" "$ir/usr/sbin" "$ir/usr/lib" "$ir/usr/lib64"
for d in bin sbin lib lib64; do rmdir "$ir/$d" 2>/dev/null || true; ln -s "usr/$d" "$ir/$d"; done
copy_dynamic() {
  local f=$1 lib
  mkdir -p "$ir$(dirname "$f")"
  cp -L "$f" "$ir$f"
  for lib in $(ldd "$f" 2>/dev/null | grep -o '/[^ ]*'); do
    [ -e "$ir$lib" ] || { mkdir -p "$ir$(dirname "$lib")"; cp -L "$lib" "$ir$lib"; }
  done
}
for tool in $(dpkg -L coreutils | grep -E '^/(usr/)?bin/') /usr/bin/dash /usr/bin/bash \
            unshare setpriv mount umount grep sed; do
  case $tool in /*) p=$tool ;; *) p=$(command -v "$tool") || { echo "test-kernels: needs $tool" >&2; exit 2; } ;; esac
  [ -f "$p" ] || continue
  p=/usr/bin/$(basename "$p")
  [ -e "$ir$p" ] || copy_dynamic "$p"
done
ln -sf dash "$ir/usr/bin/sh"
# busybox-static's; the dynamic busybox package's would need its libc.
bb=$(command -v busybox)
ldd "$bb" >/dev/null 2>&1 && { echo "test-kernels: $bb is dynamic: needs busybox-static" >&2; exit 2; }
cp "$bb" "$ir/usr/bin/busybox"
for app in $("$bb" --list); do
  [ -e "$ir/usr/bin/$app" ] || ln -s busybox "$ir/usr/bin/$app"
done
# The app's loader and libc.
for lib in $(ldd "$fl/app" | grep -o '/[^ ]*'); do
  [ -e "$ir$lib" ] || { mkdir -p "$ir$(dirname "$lib")"; cp -L "$lib" "$ir$lib"; }
done
echo ktest >"$ir/etc/hostname"
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$ir/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' >"$ir/etc/group"
cp scripts/kernels/init "$ir/init"
(cd "$ir" && find . | cpio -o -H newc --quiet) >"$work/initramfs.cpio"
echo "initramfs: $(du -h "$work/initramfs.cpio" | cut -f1), built in $((SECONDS - start)) s"

# One boot per kernel. -smp 1: with multi-threaded TCG (-smp 2) one boot
# panicked in the kernel's text patching as programs attached.
failed=()
for suite in "${suites[@]}"; do
  log=$cache/$suite.log
  t0=$SECONDS
  # Kernel parameters with '=' reach /init as its environment.
  params="KTEST_SUITE=$suite"
  # bookworm's and trixie's kernels allow fentry: the eBPF scenarios run
  # its hook there, and a fall-back to the raw tracepoints fails the run.
  case $suite in
    bookworm|trixie) params+=" CUDATRACE_REQUIRE_FENTRY=1" ;;
  esac
  limit=900
  [ "$suite" = bullseye ] && limit=1800
  timeout "$limit" qemu-system-x86_64 -accel tcg -smp 1 -cpu max -m 2048 -nographic -no-reboot \
    -kernel "$cache/$suite/vmlinuz" -initrd "$work/initramfs.cpio" \
    -append "console=ttyS0 panic=-1 quiet $params" </dev/null >"$log" 2>&1 || true
  kernel=$(sed -n 's/^KTEST-KERNEL \([^[:space:]]*\).*/\1/p' "$log" | head -1)
  kernel=${kernel:-$(cat "$cache/$suite/version")}
  echo "== $suite ($kernel): $((SECONDS - t0)) s; log $log"
  scripts/kernels/table.sh "$log" "$plan" "$suite" || failed+=("$suite ($kernel)")
done
echo "kernel matrix: $((SECONDS - start)) s"
if [ ${#failed[@]} -gt 0 ]; then
  echo "kernel matrix FAILED on: ${failed[*]}" >&2
  exit 1
fi
