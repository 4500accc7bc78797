#!/usr/bin/env bash
# The pod service's answers, timed through the CLI as a user runs it (criusd on a CNI bridge, seed images
# imported offline):
#   apply — `crius apply -f` of the seed Job and its ConfigMap, until the command returns (the pods start in
#           the background); the median of N (default 10) apply/delete rounds;
#   get   — `crius get pods` (table) and `crius get pods -o json` with P (default 50) pods running; the median
#           of 20 calls each.
# No peer answers these calls on one machine without a cluster (kubectl needs an API server), so the figures
# are printed next to issue 13's targets (apply < 1 s, get of 50 pods < 100 ms) as ratios of the target. Not a
# test: figures depend on the machine. Usage: [BENCH_BIN=DIR | BENCH_PROFILE=debug] hack/bench-service.sh [N] [P]
# (root; hack/install-deps.sh first)
set -euo pipefail
cd "$(dirname "$0")/.."
source hack/lib/bench.sh
n=${1:-10}
pods=${2:-50}
bench_build   # BENCH_BIN=DIR, BENCH_PROFILE=debug: see hack/lib/bench.sh
work=$(mktemp -d /tmp/crius-bench-service.XXXXXX)
bridge=criusbs$$
bridge=${bridge:0:15}
criusd_pid=
crius() { "$bin/crius" --address "$work/crius.sock" "$@"; }
cleanup() {
  for o in $(crius get jobs -o name 2>/dev/null) $(crius get pods -o name 2>/dev/null); do
    crius delete "${o%%/*}" "${o#*/}" --now --wait=false >/dev/null 2>&1 || true
  done
  wait_gone 2>/dev/null || true
  [ -n "$criusd_pid" ] && { kill "$criusd_pid" 2>/dev/null || true; wait "$criusd_pid" 2>/dev/null || true; }
  umount_under "$work"
  ip link del "$bridge" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

bench_conflist "$work/net.d" "$bridge" 10.213.0.0/24
cat > "$work/criusd.toml" <<TOML
[pods]
log_root = "$work/logs"
pull = "missing"
TOML
"$bin/crius-mkimage" seeds "$work/layout" >/dev/null
"$bin/criusd" --config "$work/criusd.toml" --root "$work/crius/lib" --state "$work/crius/run" \
  --listen "$work/crius.sock" --cni-conf-dir "$work/net.d" --cni-plugin-dir /usr/lib/cni \
  2>"$work/criusd.log" & criusd_pid=$!
for _ in $(seq 200); do [ -S "$work/crius.sock" ] && break; sleep 0.05; done
crius images import "$work/layout" >/dev/null

wait_gone() { # until no pod is left
  for _ in $(seq 300); do [ -z "$(crius get pods -o name)" ] && return; sleep 0.1; done
  echo "pods left after delete: $(crius get pods -o name)" >&2; return 1
}
running() { crius get pods -o jsonpath='{.items[*].status.phase}' | tr ' ' '\n' | grep -c '^Running$' || true; }

m=tests/privileged/manifests
applies=()
for _ in $(seq "$n"); do
  applies+=("$(ms crius apply -f "$m/fluent-bit-config.yaml" -f "$m/seed-job.yaml")")
  crius delete job data-processing-job >/dev/null
  wait_gone || exit 1
done
apply=$(printf '%s\n' "${applies[@]}" | median)

for i in $(seq "$pods"); do
  cat <<YAML
---
apiVersion: v1
kind: Pod
metadata: {name: p$i}
spec:
  terminationGracePeriodSeconds: 1
  containers: [{name: c, image: myapp:latest, command: [sleep, "100000"]}]
YAML
done > "$work/pods.yaml"
crius apply -f "$work/pods.yaml" >/dev/null
for _ in $(seq 600); do [ "$(running)" = "$pods" ] && break; sleep 0.2; done
up=$(running)
[ "$up" = "$pods" ] || { echo "only $up of $pods pods running" >&2; exit 1; }
gets=() jsons=()
for _ in $(seq 20); do
  gets+=("$(ms crius get pods)")
  jsons+=("$(ms crius get pods -o json)")
done
get=$(printf '%s\n' "${gets[@]}" | median)
json=$(printf '%s\n' "${jsons[@]}" | median)

ratio() { awk -v f="$1" -v t="$2" 'BEGIN {printf "%.2f", f / t}'; }
printf '%-34s %10s %10s %16s\n' figure "ms" "target ms" "of the target"
printf '%-34s %10s %10s %16s\n' "apply of the seed Job" "$apply" 1000 "$(ratio "$apply" 1000)"
printf '%-34s %10s %10s %16s\n' "get pods ($pods running)" "$get" 100 "$(ratio "$get" 100)"
printf '%-34s %10s %10s %16s\n' "get pods -o json ($pods running)" "$json" 100 "$(ratio "$json" 100)"
