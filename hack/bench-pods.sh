#!/usr/bin/env bash
# Pod start and pod lifecycle through CRI, criusd next to containerd 1.6 (its CRI plugin, runc, a pause
# stand-in as sandbox image) in the same run, both driven by the same client: the pod engine (`crius run`), on
# the same CNI bridge config. Two pods, each run N times (default 10) on each runtime:
#   one   — one container `true` (restartPolicy Never): sandbox, create, start, exit, stop, remove;
#   seed  — the seeds' sidecar Job shape, with `true` for every program: a sidecar, an init container, a worker.
# Prints medians (ms): sandbox ready (RunPodSandbox + PodSandboxStatus), first container started, the whole run
# (from process start to exit, pod removed), and crius's ratios. The engine reads states every 100 ms (a
# kubelet relists every 1 s) and, where the runtime serves GetContainerEvents (criusd; not containerd 1.6),
# wakes on the pod's events. Not a test: figures depend on the
# machine. Usage: [BENCH_BIN=DIR | BENCH_PROFILE=debug] hack/bench-pods.sh [N]   (root; hack/install-deps.sh first)
set -euo pipefail
cd "$(dirname "$0")/.."
source hack/lib/bench.sh
n=${1:-10}
bench_build   # BENCH_BIN=DIR, BENCH_PROFILE=debug: see hack/lib/bench.sh
work=$(mktemp -d /tmp/crius-bench-pods.XXXXXX)
bridge=criusbp$$
bridge=${bridge:0:15}
criusd_pid= ctrd_pid=
cleanup() {
  for p in $criusd_pid $ctrd_pid; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  umount_under "$work"
  ip link del "$bridge" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

bench_conflist "$work/net.d" "$bridge" 10.211.0.0/24
bench_images seeds "$work/images.tar"

cat > "$work/one.yaml" <<'YAML'
apiVersion: v1
kind: Pod
metadata: {name: one}
spec:
  restartPolicy: Never
  containers: [{name: c, image: myapp:latest, command: ["true"]}]
YAML
cat > "$work/seed.yaml" <<'YAML'
apiVersion: batch/v1
kind: Job
metadata: {name: seed}
spec:
  template:
    spec:
      restartPolicy: Never
      initContainers:
      - {name: log-agent, image: fluent/fluent-bit:3.2, restartPolicy: Always, command: [sh, -c, "trap 'exit 0' TERM; while :; do sleep 1 & wait $!; done"]}
      - {name: db-migration, image: flyway:latest, command: ["true"]}
      containers:
      - {name: worker, image: data-worker:latest, command: ["true"]}
YAML

"$bin/criusd" --root "$work/crius/lib" --state "$work/crius/run" --listen "$work/crius.sock" \
  --cni-conf-dir "$work/net.d" --cni-plugin-dir /usr/lib/cni 2>"$work/criusd.log" & criusd_pid=$!
containerd_toml "$work/containerd.toml" "$work/ctrd/state" "$work/containerd.sock" "$work/net.d"
containerd --config "$work/containerd.toml" 2>"$work/containerd.log" & ctrd_pid=$!
daemons_up "$work/containerd.sock" "$work/crius.sock"
import_images "$work/images.tar" "$work/containerd.sock" "$work/crius.sock"

# run RUNTIME POD: one run; prints "sandbox_ms started_ms total_ms".
run() {
  local sock=$work/$1.sock t0 t1 err
  err=$work/run.err
  t0=$(date +%s%N)
  "$bin/crius" --address "$sock" run "$work/$2.yaml" --pull never --pods-dir "$work/pods" \
    --log-root "$work/logs" -o json >/dev/null 2>"$err" || { cat "$err" >&2; exit 1; }
  t1=$(date +%s%N)
  awk -v total=$(( (t1 - t0) / 1000000 )) '
    / sandbox / && !s {s = $1 + 0}
    / started/ && !c {c = $1 + 0}
    END {printf "%d %d %d\n", s * 1000, c * 1000, total}' "$err"
}
median() { sort -n | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : int((a[NR / 2] + a[NR / 2 + 1]) / 2)}'; }

printf '%-6s %-11s %12s %12s %12s\n' pod runtime "sandbox ms" "started ms" "total ms"
for pod in one seed; do
  declare -A med=()
  for rt in crius containerd; do
    run "$rt" "$pod" >/dev/null   # warm-up
    : > "$work/samples"
    for _ in $(seq "$n"); do run "$rt" "$pod" >> "$work/samples"; done
    for col in 1 2 3; do med[$rt.$col]=$(cut -d' ' -f"$col" "$work/samples" | median); done
    printf '%-6s %-11s %12s %12s %12s\n' "$pod" "$rt" "${med[$rt.1]}" "${med[$rt.2]}" "${med[$rt.3]}"
  done
  ratio() { awk -v a="${med[containerd.$1]}" -v b="${med[crius.$1]}" 'BEGIN {printf (b > 0) ? "%.1fx" : "-", a / b}'; }
  printf '%-6s %-11s %12s %12s %12s\n' "$pod" "ratio" "$(ratio 1)" "$(ratio 2)" "$(ratio 3)"
done
echo "(medians of $n runs each; ratio = containerd / crius, higher is better for crius)"
