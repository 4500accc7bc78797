#!/usr/bin/env bash
# Restart at scale: criusd next to containerd 1.6 (its CRI plugin, runc, a pause stand-in as sandbox image), each
# holding RUNNING running containers (`sleep 3600`) and EXITED exited ones (`sleep 0`, started and gone at once)
# in PODS host-network pods, made through the CRI by hack/cri-restart.py on PAR streams. Then each daemon is
# SIGKILLed and started again, and the script times how long from that start until Version answers and until
# ListContainers answers, and reads the daemon's RSS once it has. The lists before and after must be the same
# (no container lost, none changed state). Prints per runtime: the times, the count listed, the RSS before the
# kill and after the restart. Goal: ListContainers within 1 s of the start.
# Usage: hack/bench-restart.sh [RUNNING] [EXITED]   (root; hack/install-deps.sh first; defaults 300 1000;
# PODS=50 PAR=8). Not a test, not part of CI: figures depend on the machine. BENCH_PROFILE=debug (or PROFILE=debug) measures
# the debug build instead of the release one, BENCH_BIN=DIR the binaries in DIR; CRIUSD and CRIUS_SHIM measure other builds.
# Both daemons keep their state (records, bundles, sockets, namespace pins) on a tmpfs, as in /run on a node.
set -euo pipefail
cd "$(dirname "$0")/.."
source hack/lib/bench.sh
running=${1:-300}
exited=${2:-1000}
pods=${PODS:-50}
par=${PAR:-8}
# PROFILE=debug is BENCH_PROFILE=debug (the name this script had first).
BENCH_PROFILE=${BENCH_PROFILE:-${PROFILE:-release}}
bench_build shim   # the shim as it ships; BENCH_BIN=DIR, BENCH_PROFILE=debug: see hack/lib/bench.sh
profile=${BENCH_BIN:-$BENCH_PROFILE}
shim=${CRIUS_SHIM:-$shim}
criusd=${CRIUSD:-$bin/criusd}
work=$(mktemp -d /tmp/crius-bench-restart.XXXXXX)
declare -A sock=([crius]=$work/crius.sock [containerd]=$work/containerd.sock) pid=()
client() { /usr/bin/python3 hack/cri-restart.py "$work" "${sock[$1]}" "${@:2}"; }

now() { date +%s%N; }

start_daemon() { # RUNTIME: starts it, its pid in pid[RUNTIME]
  if [ "$1" = crius ]; then
    "$criusd" --root "$work/crius/lib" --state "$work/state/crius" --listen "${sock[crius]}" --shim "$shim" \
      2>>"$work/criusd.log" &
  else
    containerd --config "$work/containerd.toml" 2>>"$work/containerd.log" &
  fi
  pid[$1]=$!
}

cleanup() {
  local status=$?
  set +e
  if [ "$status" != 0 ]; then
    mkdir -p "$work.logs" && cp "$work"/*.log "$work.logs/" && echo "bench-restart: the daemons' logs are in $work.logs" >&2
  fi
  for rt in crius containerd; do
    if [ -n "${pid[$rt]:-}" ] && kill -0 "${pid[$rt]}" 2>/dev/null; then client "$rt" clean "$par" 2>/dev/null; fi
  done
  for rt in crius containerd; do [ -n "${pid[$rt]:-}" ] && { kill "${pid[$rt]}"; wait "${pid[$rt]}"; } 2>/dev/null; done
  for s in "${sock[@]}"; do for p in $(shim_pids "$s"); do kill -9 "$p" 2>/dev/null; done; done
  umount_under "$work"
  rm -rf "$work"
}
trap cleanup EXIT

mkdir -p "$work/logs" "$work/state" "$work/proto"
mount -t tmpfs -o mode=0755 bench-state "$work/state"
containerd_toml "$work/containerd.toml" "$work/state/containerd" "${sock[containerd]}"
bench_images busybox "$work/images.tar"
# The project's CRI proto, compiled to Python stubs (as v1.proto: the stubs' module name cri-restart.py imports).
cp proto/cri/runtime/v1/api.proto "$work/proto/v1.proto"
/usr/bin/python3 -m grpc_tools.protoc -I "$work/proto" --python_out="$work" --grpc_python_out="$work" v1.proto

start_daemon crius
start_daemon containerd
daemons_up "${sock[containerd]}" "${sock[crius]}"
import_images "$work/images.tar" "${sock[containerd]}" "${sock[crius]}"

declare -A line
for rt in crius containerd; do
  t0=$(now)
  client "$rt" make "$pods" "$running" "$exited" "$par" "$work/logs/$rt" ||
    { echo "bench-restart: making the containers on $rt failed (the daemons' logs are kept)" >&2; exit 1; }
  made=$(awk -v a="$t0" -v b="$(now)" 'BEGIN {printf "%.1f", (b - a) / 1e9}')
  before=$(client "$rt" list "$work/$rt.before")
  echo "$rt: $before made in $made s" >&2
  rss_before=$(rss_kib "${pid[$rt]}")
  kill -9 "${pid[$rt]}"
  wait "${pid[$rt]}" 2>/dev/null || true
  # The poller starts first (its interpreter's start-up is not timed), then the daemon.
  client "$rt" poll >"$work/$rt.poll" &
  poller=$!
  t0=$(now)
  start_daemon "$rt"
  wait "$poller"
  rss_after=$(rss_kib "${pid[$rt]}")
  read -r version_ns list_ns count <"$work/$rt.poll"
  after=$(client "$rt" list "$work/$rt.after")
  if ! diff -u "$work/$rt.before" "$work/$rt.after" >"$work/$rt.diff"; then
    echo "bench-restart: $rt's containers changed across the restart:" >&2
    head -20 "$work/$rt.diff" >&2
    exit 1
  fi
  line[$rt]=$(awk -v t0="$t0" -v v="$version_ns" -v l="$list_ns" -v n="$count" -v b="$rss_before" -v a="$rss_after" \
    -v states="$after" 'BEGIN {printf "%10.0f %10.0f %7d %9.1f %9.1f   %s", (v - t0) / 1e6, (l - t0) / 1e6, n, b / 1024,
      a / 1024, states}')
done

echo "$running running + $exited exited containers in $pods pods; the daemon SIGKILLed and started again ($profile build):"
printf '%-11s %10s %10s %7s %9s %9s   %s\n' runtime "Version ms" "List ms" listed "RSS MiB" "after MiB" \
  "states after (same list as before)"
for rt in crius containerd; do printf '%-11s %s\n' "$rt" "${line[$rt]}"; done
