#!/usr/bin/env bash
# Benchmark: create + start + delete of a busybox `sh -c :` container, each runtime measured in the same run.
#   on the host: crius-runc vs runc (crun refuses this hybrid-cgroup host)
#   in the VM (hack/vm, pure cgroup v2): crius-runc vs runc vs crun
# Prints the median (and p90) per runtime and the ratio to crius-runc. Not a test: figures depend on the machine.
# Usage: [BENCH_BIN=DIR | BENCH_PROFILE=debug] hack/bench-runtime.sh [iterations] [all|host|vm]
# (root; hack/install-deps.sh first)
set -euo pipefail
cd "$(dirname "$0")/.."
source hack/lib/bench.sh
n=${1:-40}
where=${2:-all}

bench_build runc   # in the VM, BENCH_BIN is the outer run's; BENCH_BIN=DIR, BENCH_PROFILE=debug: see hack/lib/bench.sh
crius=$bin/crius-runc

work=$(mktemp -d /tmp/crius-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT
busybox_bundle "$work" "$crius"
jq '.process.args = ["sh", "-c", ":"]' "$work/config.json" > "$work/c" && mv "$work/c" "$work/config.json"

now() { date +%s%N; }

# bench NAME BINARY: prints "NAME median p90" in milliseconds.
bench() {
  local name=$1 bin=$2 root="$work/state-$1" times=() i t0 t1
  for ((i = 0; i < n + 3; i++)); do
    local id="b$i"
    t0=$(now)
    "$bin" --root "$root" create --bundle "$work" "$id" </dev/null >/dev/null 2>"$work/err" ||
      { echo "$name create failed: $(cat "$work/err")" >&2; exit 1; }
    "$bin" --root "$root" start "$id" >/dev/null
    "$bin" --root "$root" delete --force "$id" >/dev/null
    t1=$(now)
    ((i >= 3)) && times+=($(((t1 - t0) / 1000)))   # the first 3 warm caches
  done
  printf '%s\n' "${times[@]}" | sort -n | awk -v name="$name" '{v[NR]=$1} END {
    printf "%s %.2f %.2f\n", name, v[int((NR+1)/2)]/1000, v[int(NR*0.9)]/1000 }'
}

report() {
  local where=$1; shift
  local results=() base
  for pair in "$@"; do results+=("$(bench "${pair%%=*}" "${pair#*=}")"); done
  base=$(printf '%s\n' "${results[0]}" | awk '{print $2}')
  printf '\n%s: create+start+delete of busybox `sh -c :`, %d runs each\n' "$where" "$n"
  printf '%-12s %12s %10s %16s\n' runtime "median (ms)" "p90 (ms)" "vs crius-runc"
  for r in "${results[@]}"; do
    awk -v b="$base" '{printf "%-12s %12.2f %10.2f %15.2fx\n", $1, $2, $3, $2 / b}' <<<"$r"
  done
}

if [ "${BENCH_INNER:-}" = 1 ]; then
  report "VM (cgroup v2, TCG-emulated)" crius-runc="$crius" runc=/usr/sbin/runc crun=/usr/bin/crun
  exit 0
fi

if [ "$where" != vm ]; then
  report "host (hybrid cgroups)" crius-runc="$crius" runc=/usr/sbin/runc
fi
if [ "$where" != host ]; then
  BENCH_INNER=1 BENCH_BIN="$bin" RUN_IN_VM_TIMEOUT=1800 hack/vm/run-in-vm.sh bash hack/bench-runtime.sh "$((n / 2))"
fi
