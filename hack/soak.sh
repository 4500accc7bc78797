#!/usr/bin/env bash
# Soak: criusd under a steady churn of pods for MINUTES, sampled every minute for what grows. Not a test, not
# part of CI. Its own criusd (root and state under a mktemp dir, its own CNI bridge and host-local range, the
# seed images from crius-mkimage imported offline) runs one round every ROUND_S seconds (default 10) at a fixed
# rate (a round that overruns is counted late; the next starts at once):
#   CRI (hack/lib/soak-cri.py, grpcio): pod cR on the bridge network, under a cgroup parent of the soak's own,
#       with one container printing a line a second; on each of its living containers ExecSync, ContainerStats
#       and UpdateContainerResources (cpu shares, flipped each round: live, through the shim and crius-runc
#       update); ListContainerStats and ListPodSandboxStats; the new container's log rotated (renamed, then
#       ReopenContainerLog); pod c(R-KEEP) stopped and removed.
#   pod service (the `crius` CLI): `crius apply` of pod sR; on the pod of the round before, `crius exec`,
#       `crius logs --tail` and an in-place resize (`crius patch --subresource=resize` of its cpu request,
#       flipped each round); `crius delete pod s(R-KEEP)`.
# KEEP (default 3) pods of each kind are alive between rounds. At the end of the first round past each whole
# minute, so always at the same phase of the churn (all deletes of the round returned, KEEP pods of each kind
# alive), it waits SETTLE seconds (default 3: a shim leaves 2 s after its last container, and criusd's idle
# blocking threads end after 2 s, so sampling at once would count those of the round's deletes or not by
# chance) and samples: criusd's RSS (KiB), fds and threads; the number of shims (the containerd-shim-crius-v2
# processes whose -address is this soak's socket) and the sum of their PSS (KiB, smaps_rollup); the leftovers:
# mounts under the soak's dir, the network namespaces pinned there, cgroups under the soak's parent, the IPs
# host-local holds, the veths on the bridge, criusd's records (CRI sandboxes and containers, pod service pods),
# the image store's snapshots, and the log files. Minute 0 (the end of the first round) is printed but not
# compared: the baseline is the sample at minute 1, after a minute of warm-up (criusd's allocator and caches,
# the first shims, the QoS cgroups the pod service makes once). It fails (exit 1, naming each column) when a
# column's last sample exceeds the baseline by more than 10% (for a count at 0 in the baseline: when it is
# above 0 at the end).
# Usage: hack/soak.sh MINUTES   (root; hack/install-deps.sh first). The release binaries are built (niced)
# with `cargo build --release`; BENCH_BIN=DIR runs the ones in DIR instead. Everything it made (pods, daemon,
# shims, mounts, cgroups, the bridge, the dir) is removed on exit, also on INT/TERM.
set -euo pipefail
cd "$(dirname "$0")/.."
source hack/lib/bench.sh
minutes=${1:?usage: hack/soak.sh MINUTES}
round_s=${ROUND_S:-10}
settle=${SETTLE:-3}
keep=${KEEP:-3}
if [ -n "${BENCH_BIN:-}" ]; then
  bin=$(realpath "$BENCH_BIN")
else
  nice -n 10 cargo build --release --quiet -p crius-daemon -p crius-cli -p crius-shim -p crius-runc \
    -p crius-test-support --bin criusd --bin crius --bin containerd-shim-crius-v2 --bin crius-runc --bin crius-mkimage
  bin=$PWD/target/release
fi
work=$(mktemp -d /tmp/crius-soak.XXXXXX)
bridge=criusso$$
bridge=${bridge:0:15}
cgname=${work##*/}
cgroot=/sys/fs/cgroup/unified/$cgname
[ -f /sys/fs/cgroup/cgroup.controllers ] && cgroot=/sys/fs/cgroup/$cgname
sock=$work/crius.sock
criusd_pid=
crius() { "$bin/crius" --address "$sock" "$@"; }
cri() { /usr/bin/python3 hack/lib/soak-cri.py "$work" "$sock" "$@"; }
shim_pids() { # the shims this soak's criusd started: their -address is its socket
  local p
  for p in /proc/[0-9]*; do
    { tr '\0' ' ' <"$p/cmdline"; } 2>/dev/null | grep -q -- "shim.* -address $sock " && echo "${p#/proc/}"
  done
  return 0
}

cleanup() {
  local status=$?
  set +e
  trap - EXIT INT TERM
  if [ -n "$criusd_pid" ] && kill -0 "$criusd_pid" 2>/dev/null; then
    cri clean 2>/dev/null
    for p in $(crius get pods -o name 2>/dev/null); do crius delete pod "${p#*/}" --now >/dev/null 2>&1; done
    kill "$criusd_pid"
    wait "$criusd_pid" 2>/dev/null
  fi
  for p in $(shim_pids); do kill -9 "$p" 2>/dev/null; done
  umount_under "$work"
  if [ -d "$cgroot" ]; then
    find "$cgroot" -depth -type d | while read -r d; do
      [ -f "$d/cgroup.kill" ] && echo 1 >"$d/cgroup.kill" 2>/dev/null
      rmdir "$d" 2>/dev/null
    done
  fi
  ip link del "$bridge" 2>/dev/null
  if [ "$status" != 0 ]; then
    mkdir -p "$work.logs" && cp "$work"/*.log "$work.logs/" 2>/dev/null && echo "soak: criusd's log is in $work.logs" >&2
  fi
  rm -rf "$work"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

mkdir -p "$work/proto" "$work/cri-logs" "$cgroot/cri"
bench_conflist "$work/net.d" "$bridge" 10.214.0.0/24
cat >"$work/criusd.toml" <<TOML
[pods]
log_root = "$work/pod-logs"
pull = "missing"
cgroup_root = "/$cgname/kubepods"
TOML
cp proto/cri/runtime/v1/api.proto "$work/proto/v1.proto"
/usr/bin/python3 -m grpc_tools.protoc -I "$work/proto" --python_out="$work" --grpc_python_out="$work" v1.proto
"$bin/crius-mkimage" seeds "$work/layout" >/dev/null
"$bin/criusd" --config "$work/criusd.toml" --root "$work/crius/lib" --state "$work/crius/run" --listen "$sock" \
  --shim "$bin/containerd-shim-crius-v2" --cni-conf-dir "$work/net.d" --cni-plugin-dir /usr/lib/cni \
  2>"$work/criusd.log" &
criusd_pid=$!
for _ in $(seq 200); do [ -S "$sock" ] && break; sleep 0.05; done
crius images import "$work/layout" >/dev/null

pod_yaml() { # NAME
  cat <<YAML
apiVersion: v1
kind: Pod
metadata: {name: $1}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: c
    image: myapp:latest
    command: [sh, -c, "trap 'exit 0' TERM; while :; do echo tick; sleep 1 & wait \$!; done"]
    resources: {requests: {cpu: 100m}}
YAML
}
step() { # WHAT COMMAND...: runs it; a failure ends the soak, naming the step and the round
  "$@" >"$work/step.out" 2>&1 || { echo "soak: round $r: $* failed:" >&2; cat "$work/step.out" >&2; exit 1; }
}
retry() { # COMMAND...: up to 50 tries, 0.2 s apart (the pod of the last round may still be starting)
  local i
  for i in $(seq 50); do "$@" && return 0; [ "$i" = 50 ] || sleep 0.2; done
  return 1
}
one_round() {
  step cri round "$r" "$keep" myapp:latest "$work/cri-logs" "/$cgname/cri"
  pod_yaml "s$r" >"$work/pod.yaml"
  step crius apply -f "$work/pod.yaml"
  if [ "$r" -ge 1 ]; then
    local prev=s$((r - 1)) cpu=$((r % 2 ? 150 : 100))
    step retry crius exec "$prev" -- true
    step crius logs --tail 2 "$prev"
    step crius patch pod "$prev" --subresource resize \
      -p "{\"spec\":{\"containers\":[{\"name\":\"c\",\"resources\":{\"requests\":{\"cpu\":\"${cpu}m\"}}}]}}"
  fi
  [ "$r" -lt "$keep" ] || step crius delete pod "s$((r - keep))"
}

cols=(rss_kib fds threads shims shim_pss_kib mounts netns cgroups ips veths sandboxes containers svc_pods snapshots log_files)
sample() { # prints one value per column
  local rss threads fds pss=0 n=0 p counts
  rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$criusd_pid/status")
  threads=$(awk '/^Threads:/ {print $2}' "/proc/$criusd_pid/status")
  fds=$(ls "/proc/$criusd_pid/fd" | wc -l)
  for p in $(shim_pids); do
    n=$((n + 1))
    pss=$((pss + $(awk '/^Pss:/ {s += $2} END {print s + 0}' "/proc/$p/smaps_rollup" 2>/dev/null || echo 0)))
  done
  counts=$(cri count)
  echo "$rss" "$fds" "$threads" "$n" "$pss" \
    "$(grep -c " $work" /proc/self/mountinfo || true)" \
    "$(awk -v w=" $work" 'index($0, w) && $4 ~ /^net:/' /proc/self/mountinfo | wc -l)" \
    "$(find "$cgroot" -mindepth 1 -type d | wc -l)" \
    "$(find "$work/ipam" -type f ! -name 'last_reserved_ip*' ! -name lock 2>/dev/null | wc -l)" \
    "$(ip -o link show master "$bridge" 2>/dev/null | wc -l)" \
    "$counts" \
    "$(crius get pods -o name | wc -l)" \
    "$(find "$work/crius/lib/images/snapshots" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l)" \
    "$(find "$work/cri-logs" "$work/pod-logs" -type f 2>/dev/null | wc -l)"
}

header() { printf '%6s %6s %5s' minute rounds late; printf ' %12s' "${cols[@]}"; echo; }
header
t0=$(date +%s%N)
late=0 r=0 next_minute=0 rows=()
while :; do
  started=$(date +%s%N)
  one_round
  r=$((r + 1))
  now=$(date +%s%N)
  echo $(((now - started) / 1000000)) >>"$work/round-ms"
  elapsed_s=$(((now - t0) / 1000000000))
  if [ "$elapsed_s" -ge $((next_minute * 60)) ]; then
    sleep "$settle"
    row=$(sample)
    rows[next_minute]=$row
    printf '%6s %6s %5s' "$next_minute" "$r" "$late"
    printf ' %12s' $row
    [ "$next_minute" = 0 ] && printf '   (warm-up: not compared)'
    echo
    next_minute=$((next_minute + 1))
    [ "$next_minute" -le "$minutes" ] || break
  fi
  # Fixed rate: round r starts at t0 + r * ROUND_S; one that is due already starts at once, counted late.
  due=$((t0 + r * round_s * 1000000000))
  now=$(date +%s%N)
  if [ "$now" -lt "$due" ]; then
    sleep "$(awk -v ns=$((due - now)) 'BEGIN {printf "%.3f", ns / 1e9}')"
  else
    late=$((late + 1))
  fi
done

read -r -a first <<<"${rows[1]}"
read -r -a last <<<"${rows[minutes]}"
failed=0
for i in "${!cols[@]}"; do
  # last > first * 1.1, in integers
  if [ $((last[i] * 10)) -gt $((first[i] * 11)) ]; then
    echo "soak: ${cols[i]} grew from ${first[i]} (minute 1) to ${last[i]} (minute $minutes), more than 10%" >&2
    failed=1
  fi
done
echo "soak: $r rounds, $late late; a round took $(median <"$work/round-ms") ms (median), $(sort -n "$work/round-ms" | tail -1) ms at most"
[ "$failed" = 0 ] && echo "soak: no column grew by more than 10% from minute 1 to minute $minutes"
exit "$failed"
