#!/usr/bin/env bash
# Benchmark: checkpoint and restore with CRIU of a process holding N MiB, crius-runc side by side with runc on the
# same busybox bundle, in the cgroup-v2 VM (hack/vm: this host's kernel is too new for Debian's CRIU 3.17).
# For each size and runtime: `checkpoint` time (the process is dumped and ends), the image directory's size,
# `restore --detach` time (until the restored process runs), each the median of RUNS runs; then runc's time
# over crius-runc's. Not a test: figures depend on the machine, and TCG emulation slows CRIU's page copying.
# Usage: [BENCH_BIN=DIR] [RUNS=3] hack/bench-checkpoint.sh [MIB ...]    (default: 100 1024; root;
#        hack/install-deps.sh first). BENCH_BIN=DIR takes crius-runc and a static crius-testprog from DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
source hack/lib/bench.sh
if [ $# -gt 0 ]; then sizes=("$@"); else sizes=(100 1024); fi
runs=${RUNS:-3}

if [ "${BENCH_INNER:-}" != 1 ]; then
  if [ -n "${BENCH_BIN:-}" ]; then
    bin=$(realpath "$BENCH_BIN")
  else
    cargo build --release --quiet -p crius-runc
    cargo rustc --release --quiet -p crius-testprog --bin crius-testprog -- -C target-feature=+crt-static
    bin=$PWD/target/release
  fi
  largest=$(printf '%s\n' "${sizes[@]}" | sort -n | tail -1)
  # The process, its images (on the guest's /tmp, in RAM) and the restored copy: room for three times the largest.
  mem=$((largest * 3 + 1024))
  BENCH_INNER=1 BENCH_BIN="$bin" RUNS="$runs" RUN_IN_VM_MEM="$mem" RUN_IN_VM_TIMEOUT=3600 \
    hack/vm/run-in-vm.sh bash hack/bench-checkpoint.sh "${sizes[@]}"
  exit
fi

# Inside the VM from here.
[ -e /dev/fd ] || ln -s /proc/self/fd /dev/fd   # bash's process substitution; the guest's /dev lacks it
command -v criu >/dev/null || { echo "bench-checkpoint: criu is not installed (hack/install-deps.sh)" >&2; exit 1; }
work=$(mktemp -d /tmp/crius-bench-ckpt.XXXXXX)
ids=()
cleanup() {
  for rt in "$BENCH_BIN/crius-runc" /usr/sbin/runc; do
    for id in "${ids[@]}"; do "$rt" --root "$work/state" delete --force "$id" >/dev/null 2>&1 || true; done
  done
  rm -rf "$work"
}
trap cleanup EXIT

# One bundle for both runtimes: busybox, and the test program that allocates and touches N MiB, then waits.
busybox_bundle "$work/b" "$BENCH_BIN/crius-runc" "$BENCH_BIN/crius-testprog"

now() { date +%s%N; }

# one RT ID MIB: runs the process, checkpoints it, restores it; sets ck_ms, rs_ms and img_bytes.
one() {
  local rt=$1 id=$2 mib=$3 img="$work/img-$2" out="$work/out-$2" t0 t1 t2 t3
  jq --arg m "$mib" '.process.args = ["/bin/crius-testprog", "--alloc", $m]' "$work/b/config.json" >"$work/b/c" && mv "$work/b/c" "$work/b/config.json"
  ids+=("$id")
  : >"$out"
  # stdio are pipes the runtime records for CRIU, as a shim gives them; the reader outlives both runs.
  "$rt" --root "$work/state" run --detach --bundle "$work/b" "$id" < <(sleep 3600) > >(cat >>"$out") 2>&1
  local waited=0
  until grep -q "allocated $mib MiB" "$out"; do
    ((waited++ < 1500)) || { echo "bench-checkpoint: $rt: $id never allocated its $mib MiB: $(cat "$out")" >&2; exit 1; }
    sleep 0.2
  done
  t0=$(now)
  "$rt" --root "$work/state" checkpoint --image-path "$img" --work-path "$work/wk-$id" "$id"
  t1=$(now)
  "$rt" --root "$work/state" delete --force "$id" >/dev/null 2>&1 || true
  img_bytes=$(du -sb "$img" | cut -f1)
  t2=$(now)
  "$rt" --root "$work/state" restore --detach --bundle "$work/b" --image-path "$img" --work-path "$work/wr-$id" \
    "$id" < <(sleep 3600) > >(cat >>"$out") 2>&1
  t3=$(now)
  local status
  status=$("$rt" --root "$work/state" state "$id" | jq -r .status)
  [ "$status" = running ] || { echo "bench-checkpoint: $rt: the restored $id is $status" >&2; exit 1; }
  "$rt" --root "$work/state" delete --force "$id" >/dev/null
  rm -rf "$img" "$work/wk-$id" "$work/wr-$id"
  ck_ms=$(((t1 - t0) / 1000000)) rs_ms=$(((t3 - t2) / 1000000))
}

# CRIU's first call after boot probes the kernel (tens of seconds under TCG): one small warm-up run per runtime.
one "$BENCH_BIN/crius-runc" warm-crius 1
one /usr/sbin/runc warm-runc 1

median() { sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }

printf '\ncheckpoint and restore with CRIU %s in the VM (cgroup v2, TCG-emulated), median of %d runs\n' \
  "$(criu --version | awk '/Version/ {print $2}')" "$runs"
printf '%-10s %6s %16s %14s %12s\n' runtime MiB "checkpoint (s)" "restore (s)" "image (MiB)"
for mib in "${sizes[@]}"; do
  declare -A ck=() rs=() sz=()
  for rt in crius-runc runc; do
    bin_rt=$BENCH_BIN/crius-runc
    [ "$rt" = runc ] && bin_rt=/usr/sbin/runc
    c=() r=() s=()
    for ((i = 0; i < runs; i++)); do
      one "$bin_rt" "$rt-$mib-$i" "$mib"
      c+=("$ck_ms") r+=("$rs_ms") s+=("$img_bytes")
    done
    ck[$rt]=$(printf '%s\n' "${c[@]}" | median)
    rs[$rt]=$(printf '%s\n' "${r[@]}" | median)
    sz[$rt]=$(printf '%s\n' "${s[@]}" | median)
    awk -v n="$rt" -v m="$mib" -v c="${ck[$rt]}" -v r="${rs[$rt]}" -v s="${sz[$rt]}" \
      'BEGIN {printf "%-10s %6d %16.2f %14.2f %12.1f\n", n, m, c / 1000, r / 1000, s / 1048576}'
  done
  awk -v m="$mib" -v c="${ck[runc]}" -v d="${ck[crius-runc]}" -v r="${rs[runc]}" -v q="${rs[crius-runc]}" \
    -v s="${sz[runc]}" -v t="${sz[crius-runc]}" \
    'BEGIN {printf "%-10s %6d %15.2fx %13.2fx %11.2fx\n", "runc/crius", m, c / d, r / q, s / t}'
  unset ck rs sz
done
