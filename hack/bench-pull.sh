#!/usr/bin/env bash
# Benchmark: pull + unpack of the same images from the same local registry, crius (criusd driven by
# `crius images pull`) vs containerd 1.6 (driven by `ctr images pull`), in one run: the two test images, then a
# 5-layer image (busybox and four layers of 16 MiB of random bytes), where parallel downloads and unpacking
# while downloading count. Each iteration starts from an empty store (crius: the previous images removed, which
# collects their blobs and layers) or a fresh namespace and content (containerd).
# Prints medians and the ratio. Not a test: figures depend on the machine.
# Usage: hack/bench-pull.sh [iterations]       (root; hack/install-deps.sh first)
#   BENCH_PROFILE=debug: use the debug binaries already built (cargo build --workspace --bins) instead of a
#   release build (slower crius: its figures are then an upper bound).
#   CRIUS_MAX_DOWNLOADS=N: criusd's [image] max_concurrent_downloads (default 3, as containerd's).
set -euo pipefail
cd "$(dirname "$0")/.."
source hack/lib/bench.sh
n=${1:-10}
profile=${BENCH_PROFILE:-release}
if [ "$profile" = release ]; then
  cargo build --release --quiet -p crius-daemon -p crius-cli -p crius-test-support --bin criusd --bin crius --bin crius-mkimage
  cargo rustc -p crius-testprog --release --bin crius-testprog --quiet -- -C target-feature=+crt-static
fi
crius=$PWD/target/$profile/crius
mkimage=$PWD/target/$profile/crius-mkimage

work=$(mktemp -d /tmp/crius-bench-pull.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  umount_under "$work"
  rm -rf "$work"
}
trap cleanup EXIT

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
reg=127.0.0.1:$port
printf 'version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: %s\nhttp:\n  addr: %s\n' \
  "$work/registry" "$reg" > "$work/registry.yml"
docker-registry serve "$work/registry.yml" >"$work/registry.log" 2>&1 & pids+=($!)

cat > "$work/containerd.toml" <<TOML
version = 2
root = "$work/containerd-root"
state = "$work/containerd-state"
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = "$work/containerd.sock"
# Each iteration uses a new namespace; isolated content makes containerd download again, as crius does.
[plugins."io.containerd.metadata.v1.bolt"]
  content_sharing_policy = "isolated"
TOML
containerd --config "$work/containerd.toml" 2>"$work/containerd.log" & pids+=($!)
printf '[image]\nmax_concurrent_downloads = %s\n' "${CRIUS_MAX_DOWNLOADS:-3}" > "$work/criusd.toml"
"target/$profile/criusd" --root "$work/crius-root" --state "$work/crius-state" --listen "$work/crius.sock" \
  --config "$work/criusd.toml" --log-level warn 2>"$work/criusd.log" & pids+=($!)
export CRIUS_ADDRESS=$work/crius.sock
for _ in $(seq 200); do
  [ -S "$work/containerd.sock" ] && [ -S "$work/crius.sock" ] && (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
  sleep 0.05
done

"$mkimage" busybox "$work/layout" >/dev/null
"$mkimage" testprog "$work/layout" target/release/crius-testprog >/dev/null
"$mkimage" layered "$work/layout" layers5:latest 5 16 >/dev/null
for img in busybox crius-testprog layers5; do
  skopeo copy --quiet --dest-tls-verify=false "oci:$work/layout:$img:latest" "docker://$reg/$img:1"
done

now() { date +%s%N; }
median() { sort -n | awk '{v[NR]=$1} END {printf "%.1f", v[int((NR+1)/2)]/1000}'; }
# run LABEL IMAGE...: pulls the images with each client n times, from empty stores; prints a table.
run() {
  local label=$1 i t0 t1 img
  shift
  local crius_t=() ctr_t=()
  for i in $(seq "$n"); do
    t0=$(now)
    for img in "$@"; do "$crius" images pull -q "$reg/$img:1" >/dev/null; done
    t1=$(now)
    crius_t+=($(((t1 - t0) / 1000)))
    for img in "$@"; do "$crius" images rm "$reg/$img:1" >/dev/null; done
    t0=$(now)
    for img in "$@"; do
      ctr -a "$work/containerd.sock" -n "bench-$label-$i" images pull --plain-http "$reg/$img:1" >/dev/null
    done
    t1=$(now)
    ctr_t+=($(((t1 - t0) / 1000)))
  done
  local c d
  c=$(printf '%s\n' "${crius_t[@]}" | median)
  d=$(printf '%s\n' "${ctr_t[@]}" | median)
  printf '\npull + unpack of %s from a local registry, %d runs each (crius: %s build, %s downloads at once)\n' \
    "$*" "$n" "$profile" "${CRIUS_MAX_DOWNLOADS:-3}"
  printf '%-12s %12s %14s\n' client "median (ms)" "vs crius"
  printf '%-12s %12s %13.2fx\n' crius "$c" 1
  printf '%-12s %12s %13.2fx\n' containerd "$d" "$(awk -v d="$d" -v c="$c" 'BEGIN {print d / c}')"
}
run test busybox crius-testprog
run layers5 layers5
