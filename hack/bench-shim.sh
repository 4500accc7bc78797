#!/usr/bin/env bash
# Measures the memory of one shim per pod under containerd 1.6: containerd-shim-crius-v2 next to Debian's
# containerd-shim-runc-v2, in the same run, for a pod of one container and a pod of five (grouped by the
# io.kubernetes.cri.sandbox-id annotation, as the CRI does). Prints VmRSS, Pss (smaps_rollup) and threads of each
# pod's shim, and the ratios. Not a test: figures depend on the machine.
# Usage: hack/bench-shim.sh        (root; hack/install-deps.sh first)
set -euo pipefail
cd "$(dirname "$0")/.."
source hack/lib/bench.sh
cargo build --release --quiet -p crius-runc -p crius-test-support --bin crius-runc --bin crius-mkimage
# The shim as it ships: built for size (profile shim) and statically linked (no libc.so mapped into every pod's
# shim); crius-runc is found next to it.
cargo rustc --profile shim --quiet -p crius-shim --bin containerd-shim-crius-v2 -- -C target-feature=+crt-static
cp target/release/crius-runc target/shim/crius-runc
shim=${CRIUS_SHIM:-$PWD/target/shim/containerd-shim-crius-v2}   # CRIUS_SHIM: measure another build
work=$(mktemp -d /tmp/crius-bench-shim.XXXXXX)
pid=
cleanup() {
  if [ -n "$pid" ]; then
    for t in $(ctr -a "$work/containerd.sock" task ls -q 2>/dev/null); do
      ctr -a "$work/containerd.sock" task kill -s KILL "$t" >/dev/null 2>&1 || true
    done
    sleep 0.5
    for t in $(ctr -a "$work/containerd.sock" task ls -q 2>/dev/null); do
      ctr -a "$work/containerd.sock" task delete "$t" >/dev/null 2>&1 || true
    done
    for c in $(ctr -a "$work/containerd.sock" container ls -q 2>/dev/null); do
      ctr -a "$work/containerd.sock" container delete "$c" >/dev/null 2>&1 || true
    done
    kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true
  fi
  umount_under "$work"
  rm -rf "$work"
}
trap cleanup EXIT

cat > "$work/config.toml" <<TOML
version = 2
root = "$work/root"
state = "$work/state"
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = "$work/containerd.sock"
[ttrpc]
  address = "$work/containerd.sock.ttrpc"
TOML
containerd --config "$work/config.toml" 2>"$work/containerd.log" & pid=$!
ctr() { command ctr -a "$work/containerd.sock" "$@"; }
for _ in $(seq 200); do ctr version >/dev/null 2>&1 && break; sleep 0.05; done
target/release/crius-mkimage busybox "$work/layout" docker.io/library/busybox:latest >/dev/null
target/release/crius-mkimage archive "$work/layout" "$work/bb.tar"
ctr images import "$work/bb.tar" >/dev/null

# shim_of POD: the pid of the shim serving POD's first container.
shim_of() { ctr task ls | awk -v id="$1-0" '$1 == id {print $2}' | xargs -I{} awk '{print $4}' /proc/{}/stat 2>/dev/null |
  while read -r p; do while [ "$p" -gt 1 ] && ! grep -q containerd-shim "/proc/$p/cmdline"; do p=$(awk '{print $4}' "/proc/$p/stat"); done; echo "$p"; done; }
kb() { awk -v k="$2:" '$1 == k {print $2}' "$1"; }

printf '%-26s %4s %10s %10s %10s %10s %8s\n' shim containers "VmRSS kB" "Pss kB" "RssAnon" "RssFile" threads
declare -A rss
for rt in crius runc; do
  for n in 1 5; do
    pod=$rt-pod$n
    for i in $(seq 0 $((n - 1))); do
      if [ $rt = crius ]; then args=(--runtime "$shim" --cpu-shares 0); else args=(--runtime io.containerd.runc.v2); fi
      ctr run -d "${args[@]}" --annotation io.kubernetes.cri.sandbox-id=$pod \
        docker.io/library/busybox:latest "$pod-$i" sleep 1000 >/dev/null
    done
    # Finding the shim lists the tasks (a State call each); then wait past the shim's WORKER_IDLE (2 s): the
    # steady state a pod lives in.
    p=$(shim_of "$pod")
    sleep "${SETTLE:-3}"
    r=$(kb /proc/"$p"/status VmRSS); s=$(kb /proc/"$p"/smaps_rollup Pss); t=$(kb /proc/"$p"/status Threads)
    a=$(kb /proc/"$p"/status RssAnon); f=$(kb /proc/"$p"/status RssFile)
    name=$(tr '\0' ' ' < /proc/"$p"/cmdline | awk '{print $1}' | xargs basename)
    printf '%-26s %4d %10d %10d %10d %10d %8d\n' "$name" "$n" "$r" "$s" "$a" "$f" "$t"
    rss[$rt$n]=$r
    [ $rt = crius ] && echo "  threads: $(cat /proc/"$p"/task/*/comm | sort | uniq -c | awk '{printf "%s%s x%d", s, $2, $1; s=", "}')"
  done
done
for n in 1 5; do
  awk -v c="${rss[crius$n]}" -v r="${rss[runc$n]}" -v n="$n" \
    'BEGIN {printf "pod of %d: containerd-shim-runc-v2 uses %.2fx the VmRSS of containerd-shim-crius-v2\n", n, r / c}'
done
