#!/usr/bin/env bash
# GPU acceptance: run cudatrace against real CUDA initialisation on an NVIDIA
# host, in every failure state of issue 6, made for real. Builds nothing:
# bin/cudatrace and bin/scenario (static) are built elsewhere and carried:
#
#   make build && CGO_ENABLED=0 go build -o bin/scenario ./scripts/scenario
#   CGO_ENABLED=0 go build -o bin/rmprobe ./scripts/rmprobe   # optional: states 9-rmprobe-*
#   sudo scripts/gpu-acceptance.sh OUTDIR [--overhead N]
#
# Each state gets OUTDIR/<state>/{report.json,stdout,stderr,rc} for the traced
# run and, where useful, an untraced run of the same target beside it, so the
# target's own exit status can be compared. testdata/gpu/README.md says how
# the committed recordings were made.
set -u
out=${1:?usage: gpu-acceptance.sh OUTDIR [--overhead N]}
reps=5
[ "${2:-}" = "--overhead" ] && reps=${3:-5}
mkdir -p "$out"
out=$(cd "$out" && pwd)
CT=$PWD/bin/cudatrace
SC=$PWD/bin/scenario
for b in "$CT" "$SC"; do [ -x "$b" ] || { echo "missing $b: build it first" >&2; exit 1; }; done
[ "$(id -u)" = 0 ] || { echo "run as root" >&2; exit 1; }

TORCH='import torch; torch.zeros(1).cuda(); print("torch ok")'
CUINIT='import ctypes; c=ctypes.CDLL("libcuda.so.1"); print("cuInit", c.cuInit(0))'
TIMED='import time, torch; t=time.perf_counter(); torch.zeros(1).cuda(); torch.cuda.synchronize(); print("cuda_s %.4f" % (time.perf_counter()-t))'
uvm=${UVM_MAJOR:-$(awk '$2=="nvidia-uvm"{print $1}' /proc/devices)}
smi=$(command -v nvidia-smi || echo /usr/local/nvidia/bin/nvidia-smi)

{
  echo "date: $(date -u +%FT%TZ)"
  echo "kernel: $(uname -r)"
  echo "driver: $(head -1 /proc/driver/nvidia/version 2>/dev/null)"
  echo "gpu: $("$smi" -L 2>&1 | head -1)"
  echo "python: $(python3 -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__)' 2>&1 | tail -1)"
  echo "uvm major: $uvm"
  echo "--- mounts (tracefs/debugfs/cgroup before the run)"
  grep -E 'tracefs|debugfs|cgroup' /proc/self/mountinfo | awk '{print $5, $9}'
  echo "--- /proc/devices (nvidia)"; grep nvidia /proc/devices
  echo "--- nodes"; ls -l /dev/nvidia* /dev/nvidia-caps 2>&1
} >"$out/host.txt" 2>&1

# secs T0: seconds since T0 (date +%s%N).
secs() { awk -v a="$1" -v b="$(date +%s%N)" 'BEGIN{printf "%.4f\n", (b-a)/1e9}'; }

# record NAME CMD...: run CMD, keep stdout, stderr and exit status.
record() {
  local name=$1; shift
  mkdir -p "$out/$name"
  local t0=$(date +%s%N)
  "$@" >"$out/$name/stdout" 2>"$out/$name/stderr" </dev/null
  echo $? >"$out/$name/rc"
  secs "$t0" >"$out/$name/wall_s"
  # When each state ran (scripts/gpu-watch.sh joins watch's lines to it).
  echo "$name $t0 $(date +%s%N)" >>"$out/timeline.txt"
  printf '%-34s rc=%-4s %s\n' "$name" "$(cat "$out/$name/rc")" "$(head -c 150 "$out/$name/stderr" | head -1)"
}
# traced NAME [SCENARIO FLAGS] -- [CUDATRACE FLAGS] -- TARGET...: the same
# state untraced (NAME-untraced) and traced (NAME).
traced() {
  local name=$1; shift
  local scen=() ct=() target=()
  while [ "$1" != -- ]; do scen+=("$1"); shift; done; shift
  while [ "$1" != -- ]; do ct+=("$1"); shift; done; shift
  target=("$@")
  local wrap=() asuser=()
  [ ${#scen[@]} -gt 0 ] && wrap=("$SC" --nodes host --proc-devices host "${scen[@]}" --)
  [ "${scen[0]:-}" = none ] && wrap=()
  # The untraced run must be the same user as cudatrace's -u target.
  local i
  for i in "${!ct[@]}"; do
    if [ "${ct[$i]}" = -u ]; then
      local u=${ct[$((i + 1))]}
      asuser=(setpriv --reuid="$(id -u "$u")" --regid="$(id -g "$u")" --clear-groups --)
    fi
  done
  record "$name-untraced" "${wrap[@]}" "${asuser[@]}" "${target[@]}"
  # Seccomp filters and fd limits go on the traced run's target, not on
  # cudatrace (the untraced run has them on the target directly).
  local twrap=("${wrap[@]}")
  [ ${#wrap[@]} -gt 0 ] && twrap=("$SC" --faults-on-target "${wrap[@]:1}")
  record "$name" "${twrap[@]}" "$CT" "${ct[@]}" -o "$out/$name/report.json" -- "${target[@]}"
}

# nofile_limit: the largest RLIMIT_NOFILE (of 6..40) under which python3
# starts and prints a cuInit result but cuInit fails, found on this host
# untraced; the sweep is kept in OUTDIR/nofile-sweep.txt.
nofile_limit() {
  local n res best=
  for n in 6 8 10 12 14 16 18 20 24 28 32 40; do
    res=$("$SC" faultexec --nofile "$n" -- python3 -c "$CUINIT" 2>&1 | tail -1)
    echo "$n $res" >>"$out/nofile-sweep.txt"
    case $res in "cuInit 0") ;; cuInit*) best=$n ;; esac
  done
  echo "${best:-16}"
}

states() {
echo "== states"
# NEW_ONLY=1 runs only states 13 on (a second call within a time limit).
if [ -z "${NEW_ONLY:-}" ]; then
traced 1-healthy-root-cuinit   none -- -- python3 -c "$CUINIT"
traced 1-healthy-root-torch    none -- -- python3 -c "$TORCH"
traced 1-healthy-nobody-cuinit none -- -u nobody -- python3 -c "$CUINIT"
traced 1-healthy-nobody-torch  none -- -u nobody -- python3 -c "$TORCH"
# Every call sent (no folding): libcuda's own expected in-band failures.
traced 1-healthy-root-torch-nofold none -- --no-fold -- python3 -c "$TORCH"
traced 2-deny-uvm-cuinit  --deny-v2 "c $uvm:* rwm" -- -- python3 -c "$CUINIT"
traced 2-deny-uvm-torch   --deny-v2 "c $uvm:* rwm" -- -- python3 -c "$TORCH"
stale=(--allow-only-v2 'c 1:* rwm' --allow-only-v2 'c 5:* rwm' --allow-only-v2 'c 136:* rwm' --allow-only-v2 'c 195:* rwm' --allow-only-v2 'c 504:* rwm')
traced 3-stale-allow-cuinit "${stale[@]}" -- -- python3 -c "$CUINIT"
traced 3-stale-allow-torch  "${stale[@]}" -- -- python3 -c "$TORCH"
traced 4-deny-195-smi     --deny-v2 'c 195:* rwm' -- -- "$smi" -L
traced 4-deny-195-cuinit  --deny-v2 'c 195:* rwm' -- -- python3 -c "$CUINIT"
traced 5-uvm-missing-nobody-cuinit --drop nvidia-uvm --drop nvidia-uvm-tools -- -u nobody -- python3 -c "$CUINIT"
traced 5-uvm-missing-nobody-torch  --drop nvidia-uvm --drop nvidia-uvm-tools -- -u nobody -- python3 -c "$TORCH"
traced 5-uvm-missing-root-cuinit   --drop nvidia-uvm --drop nvidia-uvm-tools -- -- python3 -c "$CUINIT"
traced 6-uvm-stale-nobody-cuinit --node-major nvidia-uvm=504 -- -u nobody -- python3 -c "$CUINIT"
traced 6-uvm-stale-nobody-torch  --node-major nvidia-uvm=504 -- -u nobody -- python3 -c "$TORCH"
traced 7-nodev-cuinit --nodev -- -- python3 -c "$CUINIT"
traced 7-nodev-torch  --nodev -- -- python3 -c "$TORCH"
traced 8-ptrace-deny-uvm-torch --deny-v2 "c $uvm:* rwm" -- --backend ptrace -- python3 -c "$TORCH"
traced 8-ptrace-deny-uvm-cuinit --deny-v2 "c $uvm:* rwm" -- --backend ptrace -- python3 -c "$CUINIT"
traced 8-ptrace-uvm-missing-nobody-cuinit --drop nvidia-uvm --drop nvidia-uvm-tools -- --backend ptrace -u nobody -- python3 -c "$CUINIT"
traced 8-ptrace-healthy-torch none -- --backend ptrace -- python3 -c "$TORCH"
# 12: real in-band failures (bad class, bad control command, wrong version
# string) from bin/rmprobe, on /dev/nvidiactl only, under both backends.
if [ -x "$PWD/bin/rmprobe" ]; then
traced 12-rmprobe-ebpf   none -- --backend ebpf   -- "$PWD/bin/rmprobe"
traced 12-rmprobe-ptrace none -- --backend ptrace -- "$PWD/bin/rmprobe"
else
echo "bin/rmprobe missing: states 12-rmprobe-* skipped" >&2
fi
# Faults that are neither a cgroup nor a node (issue 11): a seccomp filter
# that refuses every ioctl, an fd limit too low for libcuda, and
# CUDA_VISIBLE_DEVICES naming no GPU or hiding all of them.
: >"$out/nofile-sweep.txt"
nofile=$(nofile_limit)
cvd_bad=GPU-00000000-0000-0000-0000-000000000000
for be in ebpf ptrace; do
  sfx=; [ $be = ptrace ] && sfx=-ptrace
  traced 9-seccomp-ioctl-cuinit$sfx --seccomp-deny ioctl -- --backend $be -- python3 -c "$CUINIT"
  traced 9-seccomp-ioctl-notify-cuinit$sfx --seccomp-deny ioctl --seccomp-notify -- --backend $be -- python3 -c "$CUINIT"
  traced 10-nofile-cuinit$sfx --nofile "$nofile" -- --backend $be -- python3 -c "$CUINIT"
  traced 11-cvd-invalid-cuinit$sfx none -- --backend $be -- env CUDA_VISIBLE_DEVICES=$cvd_bad python3 -c "$CUINIT"
  traced 11-cvd-none-cuinit$sfx none -- --backend $be -- env CUDA_VISIBLE_DEVICES=-1 python3 -c "$CUINIT"
done

fi # NEW_ONLY
# Issue 27: causes that leave no failing device call, under both backends.
# 13 a seccomp filter that kills (SIGSYS) on NVIDIA's ioctls; 14 RLIMIT_AS
# (cuInit 2) and an fd limit reached by fds that are not NVIDIA opens;
# 15 fork after cuInit (the child gets 3; torch refuses in the child);
# 16 another device bind-mounted over /dev/nvidia-uvm; 17 a stand-in stub
# libcuda first on LD_LIBRARY_PATH (when gcc is there to build it).
FORK_CUINIT=$'import ctypes, os\nc = ctypes.CDLL("libcuda.so.1")\nprint("cuInit", c.cuInit(0))\npid = os.fork()\nif pid == 0:\n    n = ctypes.c_int(-1)\n    print("child cuDeviceGetCount", c.cuDeviceGetCount(ctypes.byref(n)), flush=True)\n    os._exit(1)\nos.waitpid(pid, 0)'
FORK_TORCH=$'import torch, multiprocessing as mp\ndef f():\n    torch.zeros(1).cuda()\nif __name__ == "__main__":\n    torch.zeros(1).cuda()\n    p = mp.get_context("fork").Process(target=f)\n    p.start(); p.join()\n    print("child exit", p.exitcode)\n    raise SystemExit(p.exitcode)'
stubdir=
if [ -n "${STUB_LIBCUDA:-}" ]; then
  # Built elsewhere (the GPU host may have no gcc): the same three entry
  # points, from the same source below.
  stubdir=$(mktemp -d)/lib64/stubs
  mkdir -p "$stubdir" && cp "$STUB_LIBCUDA" "$stubdir/libcuda.so.1" && chmod -R a+rX "$(dirname "$(dirname "$stubdir")")"
elif command -v gcc >/dev/null; then
  stubdir=$(mktemp -d)/lib64/stubs
  mkdir -p "$stubdir"
  printf 'int cuInit(unsigned f){return 34;}\nint cuDriverGetVersion(int *v){*v=0;return 34;}\nint cuGetProcAddress_v2(const char *s, void **p, int v, unsigned long long f, int *st){return 34;}\n' |
    gcc -shared -fPIC -x c -o "$stubdir/libcuda.so.1" - && chmod -R a+rX "$(dirname "$(dirname "$stubdir")")"
fi
for be in ebpf ptrace; do
  sfx=; [ $be = ptrace ] && sfx=-ptrace
  for act in kill-process kill-thread trap; do
    # KILL_THREAD kills only libcuda's calling thread: on the H200 python
    # then never exited (untraced too), so the state is bounded.
    traced 13-seccomp-$act-cuinit$sfx --seccomp-deny ioctl:nvidia --seccomp-action $act -- --backend $be -- timeout 30 python3 -c "$CUINIT"
  done
  traced 13-seccomp-kill-process-torch$sfx --seccomp-deny ioctl:nvidia --seccomp-action kill-process -- --backend $be -- python3 -c "$TORCH"
  traced 14-rlimit-as-cuinit$sfx none -- --backend $be -- sh -c 'ulimit -v 4000000; exec python3 -c "$0"' "$CUINIT"
  traced 14-rlimit-as-torch$sfx  none -- --backend $be -- sh -c 'ulimit -v 4000000; exec python3 -c "$0"' "$TORCH"
  traced 14-nofile-48-torch$sfx --nofile 48 -- --backend $be -- python3 -c "$TORCH"
  traced 15-fork-after-init-cuinit$sfx none -- --backend $be -- python3 -c "$FORK_CUINIT"
  traced 15-fork-after-init-torch$sfx  none -- --backend $be -- python3 -c "$FORK_TORCH"
  # Issue 27 class 5: the program that denies uvm is on the parent of the
  # target's cgroup; the target's own cgroup allows everything.
  traced 21-deny-uvm-from-above-cuinit$sfx --deny-v2 "c $uvm:* rwm" --v2-leaf -- --backend $be -- python3 -c "$CUINIT"
  traced 16-foreign-uvm-node-cuinit$sfx none -- --backend $be -- unshare -m sh -c 'mount --bind /dev/null /dev/nvidia-uvm && exec python3 -c "$0"' "$CUINIT"
  if [ -n "$stubdir" ]; then
    traced 17-stub-first-cuinit$sfx none -- --backend $be -- env LD_LIBRARY_PATH="$stubdir" python3 -c "$CUINIT"
    traced 17-stub-first-torch$sfx  none -- --backend $be -- env LD_LIBRARY_PATH="$stubdir" python3 -c "$TORCH"
  fi
done

# 18 (issue 27, class 7): attach to a process that initialised CUDA
# before the attach and then only sleeps: what was seen before the attach,
# and that nothing failed while attached.
for be in ebpf ptrace; do
  name=18-attach-after-init-$be
  mkdir -p "$out/$name"
  python3 -c 'import ctypes, time; c = ctypes.CDLL("libcuda.so.1"); print("cuInit", c.cuInit(0), flush=True); time.sleep(8)' >"$out/$name/target-stdout" 2>&1 &
  tpid=$!
  sleep 3
  record "$name" "$CT" --backend "$be" -p "$tpid" --duration 2s -o "$out/$name/report.json"
  wait "$tpid"
done

# 20 (issue 27, class 2): RLIMIT_MEMLOCK 0, as nobody, with pinned and
# registered memory. Measured in session 13: CUDA pins its host memory
# uncharged to it, so every call succeeds, and the headline must say CUDA
# succeeded and blame no limit.
PINNED=$'import ctypes, mmap, resource, torch\nprint("memlock", resource.getrlimit(resource.RLIMIT_MEMLOCK))\nx = torch.ones(1 << 24).pin_memory(); y = x.cuda(non_blocking=True); torch.cuda.synchronize()\nc = ctypes.CDLL("libcuda.so.1"); b = mmap.mmap(-1, 64 << 20)\nprint("pinned", x.is_pinned(), "cuMemHostRegister", c.cuMemHostRegister_v2(ctypes.c_void_p(ctypes.addressof(ctypes.c_char.from_buffer(b))), ctypes.c_size_t(64 << 20), 0))'
for be in ebpf ptrace; do
  sfx=; [ $be = ptrace ] && sfx=-ptrace
  traced 20-memlock-0-pinned-torch$sfx none -- --backend $be -u nobody -- env HOME=/tmp sh -c 'ulimit -l 0 && exec python3 -c "$0"' "$PINNED"
done

states_libcuda

echo "== leftovers"
{
  echo "--- mounts after (tracefs/debugfs/cgroup)"
  grep -E 'tracefs|debugfs|cgroup' /proc/self/mountinfo | awk '{print $5, $9}'
  echo "--- cgroup_device and tracing programs left"
  ls /sys/fs/bpf 2>&1 | head
} >"$out/after.txt" 2>&1
cat "$out/after.txt"
}
# 19 (issue 27, class 8): which libcuda, by its contents. The host's own
# CUDA toolkit files: its forward-compatibility libcuda (another driver
# version: cuInit 803) first on LD_LIBRARY_PATH, the same file copied to a
# neutral directory as libcuda.so.1 (neither its name nor its directory
# says what it is), and the toolkit's real stub copied there likewise
# (cuInit 34). Skipped where the toolkit has no compat or stub files.
states_libcuda() {
  local compat stub neutral
  compat=$(ls -d /usr/local/cuda*/compat 2>/dev/null | head -1)
  stub=$(ls /usr/local/cuda*/targets/*/lib/stubs/libcuda.so 2>/dev/null | head -1)
  for be in ebpf ptrace; do
    sfx=; [ $be = ptrace ] && sfx=-ptrace
    if [ -n "$compat" ] && [ -e "$compat/libcuda.so.1" ]; then
      traced 19-compat-first-cuinit$sfx none -- --backend $be -- env LD_LIBRARY_PATH="$compat" python3 -c "$CUINIT"
      traced 19-compat-first-torch$sfx  none -- --backend $be -- env LD_LIBRARY_PATH="$compat" python3 -c "$TORCH"
      neutral=$(mktemp -d)/lib
      mkdir -p "$neutral" && cp "$(readlink -f "$compat/libcuda.so.1")" "$neutral/libcuda.so.1"
      traced 19-compat-renamed-cuinit$sfx none -- --backend $be -- env LD_LIBRARY_PATH="$neutral" python3 -c "$CUINIT"
      rm -rf "$(dirname "$neutral")"
      # The compat directory through ldconfig (as the cuda-compat package
      # installs it), no LD_LIBRARY_PATH; the host's configuration is put
      # back after.
      if command -v ldconfig >/dev/null && [ -d /etc/ld.so.conf.d ]; then
        echo "$compat" >/etc/ld.so.conf.d/000-cudatrace-acceptance-compat.conf && ldconfig
        traced 19-compat-ldconfig-cuinit$sfx none -- --backend $be -- env -u LD_LIBRARY_PATH python3 -c "$CUINIT"
        rm -f /etc/ld.so.conf.d/000-cudatrace-acceptance-compat.conf && ldconfig
      fi
    fi
    if [ -n "$stub" ]; then
      neutral=$(mktemp -d)/lib
      mkdir -p "$neutral" && cp "$stub" "$neutral/libcuda.so.1"
      traced 19-real-stub-renamed-cuinit$sfx none -- --backend $be -- env LD_LIBRARY_PATH="$neutral" python3 -c "$CUINIT"
      traced 19-real-stub-renamed-torch$sfx  none -- --backend $be -- env LD_LIBRARY_PATH="$neutral" python3 -c "$TORCH"
      rm -rf "$(dirname "$neutral")"
    fi
  done
}

# OVERHEAD_ONLY=1 skips the states (a second run within a time limit);
# LIBCUDA_ONLY=1 runs state 19 alone.
if [ "${LIBCUDA_ONLY:-}" = 1 ]; then
  states_libcuda
elif [ "${OVERHEAD_ONLY:-}" != 1 ]; then
  states
fi

echo "== overhead: torch.zeros(1).cuda(), $reps alternating rounds"
: >"$out/overhead.csv"
echo "round,config,wall_s,cuda_s" >>"$out/overhead.csv"
for i in $(seq 1 "$reps"); do
  for cfg in untraced ebpf ebpf-nofold ptrace; do
    case $cfg in
      untraced) cmd=(python3 -c "$TIMED") ;;
      ebpf)     cmd=("$CT" --backend ebpf -q -- python3 -c "$TIMED") ;;
      ebpf-nofold) cmd=("$CT" --backend ebpf --no-fold -q -- python3 -c "$TIMED") ;;
      ptrace)   cmd=("$CT" --backend ptrace -q -- python3 -c "$TIMED") ;;
    esac
    t0=$(date +%s%N)
    res=$("${cmd[@]}" 2>/dev/null | awk '/cuda_s/{print $2}')
    echo "$i,$cfg,$(secs "$t0"),$res" >>"$out/overhead.csv"
  done
done
cat "$out/overhead.csv"

# The uprobes' cost per probed call: cuDeviceGetCount (a uprobe at entry for
# its out-argument, a uretprobe at return) in a loop, untraced and traced.
echo "== uprobe overhead: cuDeviceGetCount x200000, ${UPROBE_REPS:-3} alternating rounds"
LOOP='import ctypes, time
c = ctypes.CDLL("libcuda.so.1"); c.cuInit(0); n = ctypes.c_int(); N = 200000
t = time.perf_counter()
for _ in range(N): c.cuDeviceGetCount(ctypes.byref(n))
print("ns_per_call %.1f" % ((time.perf_counter() - t) / N * 1e9))'
echo "round,config,ns_per_call" >"$out/uprobe-overhead.csv"
for i in $(seq 1 "${UPROBE_REPS:-3}"); do
  for cfg in untraced ebpf; do
    case $cfg in
      untraced) cmd=(python3 -c "$LOOP") ;;
      ebpf)     cmd=("$CT" --backend ebpf -q -- python3 -c "$LOOP") ;;
    esac
    res=$("${cmd[@]}" 2>/dev/null | awk '/ns_per_call/{print $2}')
    echo "$i,$cfg,$res" >>"$out/uprobe-overhead.csv"
  done
done
cat "$out/uprobe-overhead.csv"
