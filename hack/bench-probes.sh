#!/usr/bin/env bash
# Exec probes at scale (issue 30): PODS pods (default 50) run by the pod engine (`crius run`, kubelet's part),
# each one container (`sleep`) with an exec readiness probe `true` every second, for SECONDS (default 60); on
# criusd, then on containerd 1.6 + runc (the engine drives any CRI runtime). For each runtime it prints:
#   CPU         the CPU time of the runtime side over the window (ms/s): the daemon, its shims, the runtime
#               processes and the probed commands, net of an idle run (the same pods without probes). Each
#               daemon runs in a cgroup v2 of its own, `<bench>/<runtime>/daemon` (its shims and runtime
#               processes with it), and its pods under `<bench>/<runtime>/pods` (the engine's --cgroup-root):
#               the figure is `usage_usec` of cpu.stat of `<bench>/<runtime>`, which holds them all (a process
#               runc puts in v1 cgroups alone stays in its shim's v2 one, so nothing escapes). The engine itself
#               is not counted: it stands for kubelet, the same on both.
#   CPU/probe   that net CPU divided by the probes run in the window (ms);
#   ExecSync    the median and p99 of the probes' ExecSync latency as the engine times it (ms; its debug lines
#               `crius_pod::probe`), over the window;
# and the ratios containerd / crius. Other load on the machine weighs on latencies but not on the cgroup CPU
# figures, which count the runtimes' own work. Not a test: figures depend on the machine.
# Usage: [BENCH_BIN=DIR | BENCH_PROFILE=debug] hack/bench-probes.sh [PODS] [SECONDS]   (root; hack/install-deps.sh first)
set -euo pipefail
cd "$(dirname "$0")/.."
source hack/lib/bench.sh
pods=${1:-50}
secs=${2:-60}
rts=(crius containerd)
bench_build   # BENCH_BIN=DIR, BENCH_PROFILE=debug: see hack/lib/bench.sh
v2=$(awk '$3 == "cgroup2" {print $2; exit}' /proc/self/mounts)
[ -n "$v2" ] || { echo "bench-probes: no cgroup2 mount to account the runtimes' CPU in" >&2; exit 1; }
work=$(mktemp -d /tmp/crius-bench-probes.XXXXXX)
group=crius-bench-probes.$$
bridge=criusbq$$
bridge=${bridge:0:15}
criusd_pid= ctrd_pid= run_pid=
# rmdir_tree DIR: removes a cgroup directory tree, deepest first (each must be empty of processes by then).
rmdir_tree() { [ -d "$1" ] && find "$1" -depth -type d -exec rmdir {} + 2>/dev/null || true; }
cleanup() {
  if [ -n "$run_pid" ]; then kill -INT "$run_pid" 2>/dev/null || true; wait "$run_pid" 2>/dev/null || true; fi
  for p in $criusd_pid $ctrd_pid; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  umount_under "$work"
  ip link del "$bridge" 2>/dev/null || true
  sleep 1
  # v2 (both runtimes' daemons, criusd's pods) and v1 (runc's pods) directories of the benchmark's group.
  for d in "$v2/$group" /sys/fs/cgroup/*/"$group"; do rmdir_tree "$d"; done
  rm -rf "$work"
}
trap cleanup EXIT

bench_images seeds "$work/images.tar"
bench_conflist "$work/net.d" "$bridge" 10.213.0.0/22
# manifest FILE PROBE: PODS pods, with the readiness probe when PROBE is 1.
manifest() {
  local i
  for i in $(seq "$pods"); do
    cat <<YAML
---
apiVersion: v1
kind: Pod
metadata: {name: probe-$i}
spec:
  containers:
  - name: c
    image: myapp:latest
    command: [sleep, "100000"]
YAML
    if [ "$2" = 1 ]; then
      echo '    readinessProbe: {exec: {command: ["true"]}, periodSeconds: 1, timeoutSeconds: 1, failureThreshold: 3}'
    fi
  done > "$1"
}
manifest "$work/idle.yaml" 0
manifest "$work/probes.yaml" 1

mkdir -p "$v2/$group/crius/daemon" "$v2/$group/containerd/daemon"
# in_cgroup DIR COMMAND...: runs COMMAND in cgroup v2 DIR (so are the processes it starts).
# Run with `&`, its pid ($!) is COMMAND's.
in_cgroup() { local d=$1; shift; exec sh -c 'echo $$ > "$0/cgroup.procs" && exec "$@"' "$d" "$@"; }
in_cgroup "$v2/$group/crius/daemon" "$bin/criusd" --root "$work/crius/lib" --state "$work/crius/run" \
  --listen "$work/crius.sock" --cni-conf-dir "$work/net.d" --cni-plugin-dir /usr/lib/cni 2>"$work/criusd.log" &
criusd_pid=$!
containerd_toml "$work/containerd.toml" "$work/ctrd/state" "$work/containerd.sock" "$work/net.d"
in_cgroup "$v2/$group/containerd/daemon" containerd --config "$work/containerd.toml" 2>"$work/containerd.log" &
ctrd_pid=$!
daemons_up "$work/containerd.sock" "$work/crius.sock"
import_images "$work/images.tar" "$work/containerd.sock" "$work/crius.sock"

usage_us() { awk '$1 == "usage_usec" {print $2}' "$v2/$group/$1/cpu.stat"; }
running() { /usr/bin/python3 hack/lib/running.py "$work/$1.sock"; }
# window RUNTIME KIND: runs the KIND (idle, probes) pods on RUNTIME until all run (and, with probes, every pod
# has been probed), then for SECONDS; prints "CPU_US PROBES" of that window. The engine's log keeps the probes'
# timings: $work/KIND-RUNTIME.log.
window() {
  local rt=$1 kind=$2 log=$work/$2-$1.log u0 u1 p0 p1 up=
  RUST_LOG=crius_pod::probe=debug "$bin/crius" --address "$work/$rt.sock" run "$work/$kind.yaml" --pull never \
    --pods-dir "$work/pods-$rt" --log-root "$work/logs-$rt" --cgroup-root "/$group/$rt/pods" \
    >/dev/null 2>"$log" & run_pid=$!
  for _ in $(seq 1200); do
    [ "$(running "$rt")" = "$pods" ] && { up=1; break; }
    kill -0 "$run_pid" 2>/dev/null || break
    sleep 0.5
  done
  [ -n "$up" ] || { echo "bench-probes: the $kind pods did not all come up on $rt:" >&2; tail -20 "$log" >&2; exit 1; }
  sleep 3   # every pod past its first probe
  u0=$(usage_us "$rt") p0=$(grep -c 'exec probe' "$log" || true)
  sleep "$secs"
  u1=$(usage_us "$rt") p1=$(grep -c 'exec probe' "$log" || true)
  # The probes of the window, their latencies kept for the figures.
  { grep 'exec probe' "$log" || true; } | sed -n "$((p0 + 1)),${p1}p" > "$work/probes-$kind-$rt"
  { grep -o 'ms=[0-9.]*' "$work/probes-$kind-$rt" || true; } | cut -d= -f2 > "$work/ms-$kind-$rt"
  if grep -q 'ok=false' "$work/probes-$kind-$rt"; then
    echo "bench-probes: some probes failed on $rt (see $log)" >&2
  fi
  kill -INT "$run_pid"
  wait "$run_pid" 2>/dev/null || true
  run_pid=
  for _ in $(seq 600); do [ "$(running "$rt")" = 0 ] && break; sleep 0.5; done
  echo "$((u1 - u0)) $((p1 - p0))"
}
pct() { sort -n "$1" | awk -v q="$2" '{a[NR] = $1} END {i = int(NR * q); if (i < 1) i = 1; if (i > NR) i = NR; printf "%.1f", a[i]}'; }
declare -A fig=()
for rt in "${rts[@]}"; do
  # Not in a subshell: a failure ends the run, and the engine's pid is the cleanup's to stop.
  window "$rt" idle > "$work/window"
  read -r idle _ < "$work/window"
  window "$rt" probes > "$work/window"
  read -r busy n < "$work/window"
  net=$((busy - idle))
  fig[$rt.cpu]=$(awk -v u="$net" -v s="$secs" 'BEGIN {printf "%.1f", u / 1000 / s}')
  fig[$rt.probes]=$n
  fig[$rt.per]=$(awk -v u="$net" -v n="$n" 'BEGIN {printf (n > 0) ? "%.2f" : "-", u / 1000 / n}')
  fig[$rt.med]=$(pct "$work/ms-probes-$rt" 0.5)
  fig[$rt.p99]=$(pct "$work/ms-probes-$rt" 0.99)
  fig[$rt.idle]=$(awk -v u="$idle" -v s="$secs" 'BEGIN {printf "%.1f", u / 1000 / s}')
done
row() { printf '%-12s %8s %14s %14s %14s %14s %12s\n' "$@"; }
echo "$pods pods, a readiness probe \`true\` each every second, ${secs} s windows"
row runtime probes "idle (ms/s)" "net CPU (ms/s)" "CPU/probe (ms)" "ExecSync (ms)" "p99 (ms)"
for rt in "${rts[@]}"; do
  row "$rt" "${fig[$rt.probes]}" "${fig[$rt.idle]}" "${fig[$rt.cpu]}" "${fig[$rt.per]}" "${fig[$rt.med]}" "${fig[$rt.p99]}"
done
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf (b > 0) ? "%.1fx" : "-", a / b}'; }
row "containerd/crius" "" "" "$(ratio "${fig[containerd.cpu]}" "${fig[crius.cpu]}")" \
  "$(ratio "${fig[containerd.per]}" "${fig[crius.per]}")" "$(ratio "${fig[containerd.med]}" "${fig[crius.med]}")" \
  "$(ratio "${fig[containerd.p99]}" "${fig[crius.p99]}")"
