#!/usr/bin/env bash
# Streaming exec, criusd next to containerd 1.6 (its CRI plugin, runc) in the same run, driven by the same
# client: `crius exec` (CRI Exec, then SPDY to the URL it returned; crius-stream's client). A long-running pod
# is started on each runtime with the pod engine (`crius run`, in the background), then:
#   true  — the median of N (default 20) `crius exec POD -- true` runs, whole command, ms;
#   cat   — 100 MiB through exec stdout (`head -c 104857600 /dev/zero`, counted by wc), MiB/s, the median
#           of 3 runs.
# With CRICTL=/path/to/crictl, `crictl exec CONTAINER true` (SPDY) is timed on both too, next to
# `crictl version`, crictl's own start-up and one CRI call, which both exec figures include.
# The runs alternate between the runtimes. Prints the figures and crius's ratios. Not a test: figures
# depend on the machine.
# Usage: hack/bench-exec.sh [N]   (root; hack/install-deps.sh first)
set -euo pipefail
cd "$(dirname "$0")/.."
source hack/lib/bench.sh
n=${1:-20}
cargo build --release --quiet -p crius-daemon -p crius-cli -p crius-shim -p crius-runc -p crius-test-support \
  --bin criusd --bin crius --bin containerd-shim-crius-v2 --bin crius-runc --bin crius-mkimage
bin=$PWD/target/release
work=$(mktemp -d /tmp/crius-bench-exec.XXXXXX)
bridge=criusbe$$
bridge=${bridge:0:15}
criusd_pid= ctrd_pid= runs=()
cleanup() {
  for p in "${runs[@]}"; do kill -INT "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  for p in $criusd_pid $ctrd_pid; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  umount_under "$work"
  ip link del "$bridge" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

"$bin/crius-mkimage" seeds "$work/layout" >/dev/null
"$bin/crius-mkimage" pause "$work/layout" registry.k8s.io/pause:3.6 >/dev/null
"$bin/crius-mkimage" archive "$work/layout" "$work/images.tar"
cat > "$work/pod.yaml" <<'YAML'
apiVersion: v1
kind: Pod
metadata: {name: bench}
spec:
  containers: [{name: c, image: myapp:latest, command: [sh, -c, "trap 'exit 0' TERM; while :; do sleep 1 & wait $!; done"]}]
YAML
bench_conflist "$work/net.d" "$bridge" 10.212.0.0/24
"$bin/criusd" --root "$work/crius/lib" --state "$work/crius/run" --listen "$work/crius.sock" \
  --cni-conf-dir "$work/net.d" --cni-plugin-dir /usr/lib/cni 2>"$work/criusd.log" & criusd_pid=$!
cat > "$work/containerd.toml" <<TOML
version = 2
root = "$work/ctrd/root"
state = "$work/ctrd/state"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.6"
  restrict_oom_score_adj = true
[plugins."io.containerd.grpc.v1.cri".containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
[plugins."io.containerd.grpc.v1.cri".cni]
  bin_dir = "/usr/lib/cni"
  conf_dir = "$work/net.d"
[grpc]
  address = "$work/containerd.sock"
[ttrpc]
  address = "$work/containerd.sock.ttrpc"
TOML
containerd --config "$work/containerd.toml" 2>"$work/containerd.log" & ctrd_pid=$!
for _ in $(seq 200); do
  [ -S "$work/crius.sock" ] && ctr -a "$work/containerd.sock" version >/dev/null 2>&1 && break
  sleep 0.05
done
"$bin/crius" --address "$work/crius.sock" images import "$work/images.tar" >/dev/null
ctr -a "$work/containerd.sock" -n k8s.io images import "$work/images.tar" >/dev/null
for rt in crius containerd; do
  "$bin/crius" --address "$work/$rt.sock" run "$work/pod.yaml" --pull never --pods-dir "$work/pods-$rt" \
    --log-root "$work/logs-$rt" >/dev/null 2>"$work/run-$rt.log" & runs+=($!)
done
for rt in crius containerd; do
  up=
  for _ in $(seq 300); do
    "$bin/crius" --address "$work/$rt.sock" exec bench -- true 2>/dev/null && { up=1; break; }
    sleep 0.1
  done
  [ -n "$up" ] || { echo "the pod did not come up on $rt:" >&2; cat "$work/run-$rt.log" >&2; exit 1; }
done

declare -A fig=() cid=()
if [ -n "${CRICTL:-}" ]; then
  for rt in crius containerd; do
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
    for rt in crius containerd; do got[$rt]+="$("$@" "$rt") "; done
  done
  for rt in crius containerd; do fig[$rt.$name]=$(printf '%s\n' ${got[$rt]} | median); done
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
if [ -n "${CRICTL:-}" ]; then
  each crictl "$n" crictl_exec
  each crictl0 "$n" crictl_version
fi
printf '%-11s %18s %18s' runtime "exec true (ms)" "cat 100MiB (MiB/s)"
[ -n "${CRICTL:-}" ] && printf ' %22s %20s' "crictl exec true (ms)" "crictl version (ms)"
echo
for rt in crius containerd; do
  printf '%-11s %18s %18s' "$rt" "${fig[$rt.true]}" "${fig[$rt.cat]}"
  [ -n "${CRICTL:-}" ] && printf ' %22s %20s' "${fig[$rt.crictl]}" "${fig[$rt.crictl0]}"
  echo
done
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf (b > 0) ? "%.1fx" : "-", a / b}'; }
printf '%-11s %18s %18s' ratio "$(ratio "${fig[containerd.true]}" "${fig[crius.true]}")" \
  "$(ratio "${fig[crius.cat]}" "${fig[containerd.cat]}")"
[ -n "${CRICTL:-}" ] && printf ' %22s %20s' "$(ratio "${fig[containerd.crictl]}" "${fig[crius.crictl]}")" ""
echo
