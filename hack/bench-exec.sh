#!/usr/bin/env bash
# Exec on criusd twice, with the shim's direct exec (`crius`, the default) and through `crius-runc exec`
# (`crius-runc-exec`: a second criusd with --direct-exec false), next to containerd 1.6 (its CRI plugin, runc)
# in the same run, driven by the same clients. A long-running pod is started on each with the pod engine
# (`crius run`, in the background), then:
#   true  — the median of N (default 20) `crius exec POD -- true` runs, whole command, ms;
#   cat   — 100 MiB through exec stdout (`head -c 104857600 /dev/zero`, counted by wc), MiB/s, the median
#           of 3 runs;
#   ExecSync — N_SYNC (default 100) CRI ExecSync calls of `true` one after another (hack/lib/execsync.py,
#           grpcio): the median and p99 latency, and the machine's CPU time per call (/proc/stat, all but idle
#           and iowait: daemon, shim, runtime, command and the client alike; other load on the machine counts
#           too, so read it on a quiet machine);
#   rt CPU — the runtime side's CPU per ExecSync alone: each daemon runs in a cgroup v2 of its own,
#           `<bench>/<runtime>/daemon` (its shims, exec server and runtime processes with it), its pod under
#           `<bench>/<runtime>/pods`; the figure is the growth of `usage_usec` of `<bench>/<runtime>` over the
#           ExecSync calls, per call (the pod's own idle loop, a `sleep 1` a second, included). Other load on
#           the machine does not count here.
# With CRICTL=/path/to/crictl, `crictl exec CONTAINER true` (SPDY) is timed on both too, next to
# `crictl version`, crictl's own start-up and one CRI call, which both exec figures include.
# The runs alternate between the runtimes. Prints the figures and the ratios of the direct path to the others. Not a test: figures
# depend on the machine.
# Usage: [BENCH_BIN=DIR | BENCH_PROFILE=debug] hack/bench-exec.sh [N] [N_SYNC]   (root; hack/install-deps.sh first)
set -euo pipefail
cd "$(dirname "$0")/.."
source hack/lib/bench.sh
n=${1:-20}
n_sync=${2:-100}
rts=(crius crius-runc-exec containerd)
bench_build   # BENCH_BIN=DIR, BENCH_PROFILE=debug: see hack/lib/bench.sh
v2=$(awk '$3 == "cgroup2" {print $2; exit}' /proc/self/mounts)
[ -n "$v2" ] || { echo "bench-exec: no cgroup2 mount to account the runtimes' CPU in" >&2; exit 1; }
group=crius-bench-exec.$$
work=$(mktemp -d /tmp/crius-bench-exec.XXXXXX)
bridge=criusbe$$
bridge=${bridge:0:15}
criusd_pid= criusd2_pid= ctrd_pid= runs=()
cleanup() {
  for p in "${runs[@]}"; do kill -INT "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  for p in $criusd_pid $criusd2_pid $ctrd_pid; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  umount_under "$work"
  ip link del "$bridge" 2>/dev/null || true
  sleep 1
  for d in "$v2/$group" /sys/fs/cgroup/*/"$group"; do
    [ -d "$d" ] && find "$d" -depth -type d -exec rmdir {} + 2>/dev/null || true
  done
  rm -rf "$work"
}
trap cleanup EXIT

bench_images seeds "$work/images.tar"
cat > "$work/pod.yaml" <<'YAML'
apiVersion: v1
kind: Pod
metadata: {name: bench}
spec:
  containers: [{name: c, image: myapp:latest, command: [sh, -c, "trap 'exit 0' TERM; while :; do sleep 1 & wait $!; done"]}]
YAML
bench_conflist "$work/net.d" "$bridge" 10.212.0.0/24
for rt in "${rts[@]}"; do mkdir -p "$v2/$group/$rt/daemon"; done
# in_cgroup DIR COMMAND...: runs COMMAND in cgroup v2 DIR (so are the processes it starts); $! is COMMAND's.
in_cgroup() { local d=$1; shift; exec sh -c 'echo $$ > "$0/cgroup.procs" && exec "$@"' "$d" "$@"; }
usage_us() { awk '$1 == "usage_usec" {print $2}' "$v2/$group/$1/cpu.stat"; }
in_cgroup "$v2/$group/crius/daemon" "$bin/criusd" --root "$work/crius/lib" --state "$work/crius/run" \
  --listen "$work/crius.sock" --cni-conf-dir "$work/net.d" --cni-plugin-dir /usr/lib/cni 2>"$work/criusd.log" &
criusd_pid=$!
in_cgroup "$v2/$group/crius-runc-exec/daemon" "$bin/criusd" --root "$work/crius2/lib" --state "$work/crius2/run" --listen "$work/crius-runc-exec.sock" \
  --cni-conf-dir "$work/net.d" --cni-plugin-dir /usr/lib/cni --direct-exec false 2>"$work/criusd2.log" &
criusd2_pid=$!
containerd_toml "$work/containerd.toml" "$work/ctrd/state" "$work/containerd.sock" "$work/net.d"
in_cgroup "$v2/$group/containerd/daemon" containerd --config "$work/containerd.toml" 2>"$work/containerd.log" &
ctrd_pid=$!
daemons_up "$work/containerd.sock" "$work/crius.sock" "$work/crius-runc-exec.sock"
import_images "$work/images.tar" "$work/containerd.sock" "$work/crius.sock" "$work/crius-runc-exec.sock"
for rt in "${rts[@]}"; do
  "$bin/crius" --address "$work/$rt.sock" run "$work/pod.yaml" --pull never --pods-dir "$work/pods-$rt" \
    --log-root "$work/logs-$rt" --cgroup-root "/$group/$rt/pods" >/dev/null 2>"$work/run-$rt.log" & runs+=($!)
done
for rt in "${rts[@]}"; do
  up=
  for _ in $(seq 300); do
    "$bin/crius" --address "$work/$rt.sock" exec bench -- true 2>/dev/null && { up=1; break; }
    sleep 0.1
  done
  [ -n "$up" ] || { echo "the pod did not come up on $rt:" >&2; cat "$work/run-$rt.log" >&2; exit 1; }
done

declare -A fig=() cid=()
if [ -n "${CRICTL:-}" ]; then
  for rt in "${rts[@]}"; do
    cid[$rt]=$("$CRICTL" -r "unix://$work/$rt.sock" ps -q --name '^c$' | head -1)
  done
fi
# Each run goes to both runtimes in turn, so a machine that slows down or speeds up meanwhile (a shared
# host's steal time) weighs on both figures alike.
each() { # each FIGURE RUNS COMMAND...: runs COMMAND... RT for each runtime RUNS times; the medians go to fig
  local name=$1 runs=$2 rt
  shift 2
  declare -A got=()
  for _ in $(seq "$runs"); do
    for rt in "${rts[@]}"; do got[$rt]+="$("$@" "$rt") "; done
  done
  for rt in "${rts[@]}"; do fig[$rt.$name]=$(printf '%s\n' ${got[$rt]} | median); done
}
exec_true() { ms "$bin/crius" --address "$work/$1.sock" exec bench -- true; }
cat_100m() {
  local t0 t1 bytes
  t0=$(date +%s%N)
  bytes=$("$bin/crius" --address "$work/$1.sock" exec bench -- head -c 104857600 /dev/zero | wc -c)
  t1=$(date +%s%N)
  [ "$bytes" = 104857600 ] || { echo "$1: $bytes bytes through exec, not 104857600" >&2; exit 1; }
  awk -v ns=$((t1 - t0)) 'BEGIN {printf "%.0f\n", 100 / (ns / 1e9)}'
}
crictl_exec() { ms "$CRICTL" -r "unix://$work/$1.sock" exec "${cid[$1]}" true; }
# crictl's own cost (start-up, config lookup, one CRI call), in both crictl figures alike.
crictl_version() { ms "$CRICTL" -r "unix://$work/$1.sock" version; }
each true "$n" exec_true
each cat 3 cat_100m
for rt in "${rts[@]}"; do
  u0=$(usage_us "$rt")
  read -r "fig[$rt.sync]" "fig[$rt.p99]" "fig[$rt.cpu]" < <(/usr/bin/python3 hack/lib/execsync.py "$work/$rt.sock" "$n_sync")
  u1=$(usage_us "$rt")
  fig[$rt.rtcpu]=$(awk -v d=$((u1 - u0)) -v n="$n_sync" 'BEGIN {printf "%.2f\n", d / n / 1000}')
done
if [ -n "${CRICTL:-}" ]; then
  each crictl "$n" crictl_exec
  each crictl0 "$n" crictl_version
fi
row() { printf '%-16s %15s %15s %15s %13s %13s %13s' "$@"; }
row runtime "exec true (ms)" "cat (MiB/s)" "ExecSync (ms)" "p99 (ms)" "CPU/exec (ms)" "rt CPU (ms)"
[ -n "${CRICTL:-}" ] && printf ' %22s %20s' "crictl exec true (ms)" "crictl version (ms)"
echo
for rt in "${rts[@]}"; do
  row "$rt" "${fig[$rt.true]}" "${fig[$rt.cat]}" "${fig[$rt.sync]}" "${fig[$rt.p99]}" "${fig[$rt.cpu]}" \
    "${fig[$rt.rtcpu]}"
  [ -n "${CRICTL:-}" ] && printf ' %22s %20s' "${fig[$rt.crictl]}" "${fig[$rt.crictl0]}"
  echo
done
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf (b > 0) ? "%.1fx" : "-", a / b}'; }
# How many times better the direct path is than `other`: times and CPU divided, throughput multiplied.
for other in crius-runc-exec containerd; do
  row "vs $other" "$(ratio "${fig[$other.true]}" "${fig[crius.true]}")" \
    "$(ratio "${fig[crius.cat]}" "${fig[$other.cat]}")" "$(ratio "${fig[$other.sync]}" "${fig[crius.sync]}")" \
    "$(ratio "${fig[$other.p99]}" "${fig[crius.p99]}")" "$(ratio "${fig[$other.cpu]}" "${fig[crius.cpu]}")" \
    "$(ratio "${fig[$other.rtcpu]}" "${fig[crius.rtcpu]}")"
  [ -n "${CRICTL:-}" ] && printf ' %22s %20s' "$(ratio "${fig[$other.crictl]}" "${fig[crius.crictl]}")" ""
  echo
done
