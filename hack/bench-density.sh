#!/usr/bin/env bash
# Pod density through CRI: criusd next to containerd 1.6 (its CRI plugin, runc, a pause stand-in as sandbox image)
# in the same run, both driven by crictl on the same CNI bridge config and the same locally imported image.
# Each round starts N pods of one container (`sleep 3600`) on P parallel streams (crictl runp + create + start per
# pod), measures memory with all N up, then stops and removes them all (crictl stopp + rmp, P streams). Rounds
# alternate which runtime goes first. Prints per runtime (median over the rounds):
#   pods/s      N / wall time from the first runp to the last start returning
#   teardown s  wall time to stop and remove all N pods
#   daemon idle the daemon's RSS and PSS (MiB, /proc/PID/status and smaps_rollup) after the image import, before
#               the first round, and again after the last round
#   daemon N    the daemon's RSS and PSS with the N pods up
#   shim/pod    the sum of the pod shims' PSS / N (KiB)
# and the ratios crius/containerd. Not a test: figures depend on the machine (on a VM with steal time, look at
# several rounds). Usage: [BENCH_BIN=DIR | BENCH_PROFILE=debug] hack/bench-density.sh [N] [P]   (root; hack/install-deps.sh first; ROUNDS=2)
# DRIVER=grpc starts the pods through the CRI directly (hack/cri-start.py on Debian's python3-grpcio, one
# channel per stream) instead of crictl, whose own start-up per call weighs on both runtimes alike.
# Both daemons keep their state (records, bundles, sockets, namespace pins) on a tmpfs, as in /run on a node;
# STATE=disk puts it next to their roots instead (on this machine's disk, as /run is here).
set -euo pipefail
cd "$(dirname "$0")/.."
source hack/lib/bench.sh
n=${1:-100}
par=${2:-8}
rounds=${ROUNDS:-2}
driver=${DRIVER:-crictl}
state=${STATE:-tmpfs}
case $state in tmpfs | disk) ;; *) echo "bench-density: STATE is tmpfs or disk, not $state" >&2; exit 2 ;; esac
case $driver in crictl | grpc) ;; *) echo "bench-density: DRIVER is crictl or grpc, not $driver" >&2; exit 2 ;; esac
crictl_bin=${CRICTL:-$(command -v crictl || echo /work/tools/bin/crictl)}
[ -x "$crictl_bin" ] || { echo "bench-density: crictl not found (CRICTL=path)" >&2; exit 1; }
bench_build shim   # the shim as it ships; BENCH_BIN=DIR, BENCH_PROFILE=debug: see hack/lib/bench.sh
shim=${CRIUS_SHIM:-$shim}   # CRIUS_SHIM, CRIUSD: measure other builds
criusd=${CRIUSD:-$bin/criusd}
work=$(mktemp -d /tmp/crius-bench-density.XXXXXX)
bridge=criusbd$$
bridge=${bridge:0:15}
criusd_pid= ctrd_pid=
declare -A sock=([crius]=$work/crius.sock [containerd]=$work/containerd.sock)

cri() { # RUNTIME ARGS...
  local s=${sock[$1]}
  shift
  "$crictl_bin" --config "$work/crictl.yaml" -r "unix://$s" -i "unix://$s" -t 120s "$@"
}

daemon_pid() { if [ "$1" = crius ]; then echo "$criusd_pid"; else echo "$ctrd_pid"; fi; }
mib() { awk -v k="$1" 'BEGIN {printf "%.1f", k / 1024}'; }

teardown() { # RUNTIME: stops and removes every pod, P at a time
  cri "$1" pods -q 2>/dev/null | xargs -r -P "$par" -n 1 sh -c \
    "'$crictl_bin' --config '$work/crictl.yaml' -r 'unix://${sock[$1]}' -i 'unix://${sock[$1]}' -t 120s stopp \"\$0\" >/dev/null &&
     '$crictl_bin' --config '$work/crictl.yaml' -r 'unix://${sock[$1]}' -i 'unix://${sock[$1]}' -t 120s rmp \"\$0\" >/dev/null"
}

cleanup() {
  set +e
  for rt in crius containerd; do [ -S "${sock[$rt]}" ] && teardown "$rt" 2>/dev/null; done
  for p in $criusd_pid $ctrd_pid; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  # shims left by a failed run: ours by their -address
  for s in "${sock[@]}"; do for p in $(shim_pids "$s"); do kill -9 "$p" 2>/dev/null; done; done
  umount_under "$work"
  ip link del "$bridge" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

mkdir -p "$work/net.d" "$work/cfg" "$work/logs" "$work/state"
[ "$state" = disk ] || mount -t tmpfs -o mode=0755 bench-state "$work/state"
: >"$work/crictl.yaml"
bench_conflist "$work/net.d" "$bridge" 10.212.0.0/16
bench_images seeds "$work/images.tar"

"$criusd" --root "$work/crius/lib" --state "$work/state/crius" --listen "${sock[crius]}" --shim "$shim" \
  --cni-conf-dir "$work/net.d" --cni-plugin-dir /usr/lib/cni 2>"$work/criusd.log" &
criusd_pid=$!
containerd_toml "$work/containerd.toml" "$work/state/containerd" "${sock[containerd]}" "$work/net.d"
containerd --config "$work/containerd.toml" 2>"$work/containerd.log" &
ctrd_pid=$!
daemons_up "${sock[containerd]}" "${sock[crius]}"
import_images "$work/images.tar" "${sock[containerd]}" "${sock[crius]}"
cat >"$work/ctr.json" <<'JSON'
{"metadata": {"name": "c"}, "image": {"image": "myapp:latest"}, "command": ["sleep", "3600"], "log_path": "c.log",
 "linux": {}}
JSON
sleep 2 # let both settle after the import
declare -A idle_rss idle_pss
for rt in crius containerd; do
  idle_rss[$rt]=$(rss_kib "$(daemon_pid $rt)") idle_pss[$rt]=$(pss_kib "$(daemon_pid $rt)")
done

# One pod: runp + create + start. Arguments: runtime, round, index.
cat >"$work/one.sh" <<'SH'
#!/bin/sh
set -e
rt=$1 r=$2 i=$3 work=$4 s=$5 crictl=$6
c() { "$crictl" --config "$work/crictl.yaml" -r "unix://$s" -i "unix://$s" -t 120s "$@"; }
cfg=$work/cfg/$rt-$r-$i.json
mkdir -p "$work/logs/$rt-$r-$i"
printf '{"metadata": {"name": "d%s-%s", "uid": "uid-%s-%s-%s", "namespace": "bench"}, "log_directory": "%s", "linux": {}}\n' \
  "$r" "$i" "$rt" "$r" "$i" "$work/logs/$rt-$r-$i" >"$cfg"
err=$work/cfg/$rt-$r-$i.err
pod=$(c runp "$cfg" 2>"$err") || { cat "$err" >&2; exit 1; }
ctr=$(c create --no-pull "$pod" "$work/ctr.json" "$cfg" 2>"$err") || { cat "$err" >&2; exit 1; }
c start "$ctr" >/dev/null 2>"$err" || { cat "$err" >&2; exit 1; }
SH
chmod +x "$work/one.sh"
if [ "$driver" = grpc ]; then
  # The project's CRI proto, compiled to Python stubs (as v1.proto: the stubs' module name cri-start.py imports).
  mkdir -p "$work/proto" && cp proto/cri/runtime/v1/api.proto "$work/proto/v1.proto"
  /usr/bin/python3 -m grpc_tools.protoc -I "$work/proto" --python_out="$work" --grpc_python_out="$work" v1.proto
fi

now() { date +%s%N; }
# crictl's own cost: the 3 calls per pod as `crictl version` (a no-op CRI call) on the same P streams, so the
# pods/s above can be read against the most crictl lets through here.
t0=$(now)
seq $((3 * n)) | xargs -P "$par" -I{} "$crictl_bin" --config "$work/crictl.yaml" -r "unix://${sock[crius]}" \
  -i "unix://${sock[crius]}" version >/dev/null
floor=$(awk -v n="$n" -v a="$t0" -v b="$(now)" 'BEGIN {printf "%.1f", n / ((b - a) / 1e9)}')
# round RUNTIME R: prints "pods_per_s teardown_s rss_kib pss_kib shim_kib_per_pod"
round() {
  local rt=$1 r=$2 t0 t1 t2 up d rss pss shims=0 p
  t0=$(now)
  if [ "$driver" = grpc ]; then
    /usr/bin/python3 hack/cri-start.py "$work" "${sock[$rt]}" "$n" "$par" "$rt-$r" "$work/logs" ||
      { echo "bench-density: starting pods on $rt failed (logs in $work)" >&2; tail -5 "$work/$rt"*.log >&2; exit 1; }
  else
    seq "$n" | xargs -P "$par" -I{} "$work/one.sh" "$rt" "$r" {} "$work" "${sock[$rt]}" "$crictl_bin" ||
      { echo "bench-density: starting pods on $rt failed (logs in $work)" >&2; tail -5 "$work/$rt"*.log >&2; exit 1; }
  fi
  t1=$(now)
  up=$(cri "$rt" ps -q --state running | wc -l)
  [ "$up" -eq "$n" ] || { echo "bench-density: $up of $n containers running on $rt" >&2; exit 1; }
  sleep 1 # memory once the start-up work is over
  d=$(daemon_pid "$rt")
  rss=$(rss_kib "$d") pss=$(pss_kib "$d")
  for p in $(shim_pids "${sock[$rt]}"); do shims=$((shims + $(pss_kib "$p"))); done
  teardown "$rt"
  t2=$(now)
  [ "$(cri "$rt" pods -q | wc -l)" -eq 0 ] || { echo "bench-density: pods left on $rt" >&2; exit 1; }
  awk -v n="$n" -v a="$t0" -v b="$t1" -v c="$t2" -v rss="$rss" -v pss="$pss" -v sh="$shims" \
    'BEGIN {printf "%.1f %.2f %d %d %d\n", n / ((b - a) / 1e9), (c - b) / 1e9, rss, pss, sh / n}'
}

: >"$work/samples"
for r in $(seq "$rounds"); do
  if [ $((r % 2)) = 1 ]; then order="crius containerd"; else order="containerd crius"; fi
  for rt in $order; do
    line=$(round "$rt" "$r")
    echo "$rt $line" >>"$work/samples"
    echo "round $r $rt: pods/s, teardown s, daemon RSS KiB, PSS KiB, shim PSS KiB/pod: $line" >&2
  done
done
sleep 2
declare -A after_rss after_pss
for rt in crius containerd; do
  after_rss[$rt]=$(rss_kib "$(daemon_pid $rt)") after_pss[$rt]=$(pss_kib "$(daemon_pid $rt)")
done

declare -A m
for rt in crius containerd; do
  for col in 2 3 4 5 6; do m[$rt.$col]=$(awk -v rt="$rt" -v c="$col" '$1 == rt {print $c}' "$work/samples" | median); done
done
printf '%-11s %8s %11s %17s %17s %17s %10s\n' runtime pods/s "teardown s" "idle RSS/PSS MiB" "$n pods RSS/PSS" \
  "after RSS/PSS" "shim/pod"
for rt in crius containerd; do
  printf '%-11s %8s %11s %17s %17s %17s %7s KiB\n' "$rt" "${m[$rt.2]}" "${m[$rt.3]}" \
    "$(mib "${idle_rss[$rt]}") / $(mib "${idle_pss[$rt]}")" "$(mib "${m[$rt.4]}") / $(mib "${m[$rt.5]}")" \
    "$(mib "${after_rss[$rt]}") / $(mib "${after_pss[$rt]}")" "${m[$rt.6]}"
done
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf (b > 0) ? "%.2f" : "-", a / b}'; }
printf '%-11s %8s %11s %17s %17s %17s %10s\n' crius/ctrd "$(ratio "${m[crius.2]}" "${m[containerd.2]}")" \
  "$(ratio "${m[crius.3]}" "${m[containerd.3]}")" \
  "$(ratio "${idle_rss[crius]}" "${idle_rss[containerd]}") / $(ratio "${idle_pss[crius]}" "${idle_pss[containerd]}")" \
  "$(ratio "${m[crius.4]}" "${m[containerd.4]}") / $(ratio "${m[crius.5]}" "${m[containerd.5]}")" \
  "$(ratio "${after_rss[crius]}" "${after_rss[containerd]}") / $(ratio "${after_pss[crius]}" "${after_pss[containerd]}")" \
  "$(ratio "${m[crius.6]}" "${m[containerd.6]}")"
echo "(crictl alone, 3 no-op calls per pod on $par streams: $floor pods/s at most)"
echo "(N=$n pods on $par streams driven by $driver, state on $state, medians of $rounds rounds, alternating which runtime goes first;" \
  "goals: crius >= 4x containerd's pods/s, shim < 300 KiB/pod, criusd < 10 MB RSS idle and < 20 MB with 100 pods)"
