# Shared by the hack/bench-*.sh scripts (sourced, not run). Each script sets `work` (its temporary
# directory) before it calls these.

# umount_under DIR: lazily unmounts everything mounted below DIR, deepest first.
umount_under() {
  { grep -o " $1[^ ]*" /proc/self/mountinfo || true; } | sort -r | while read -r m; do umount -l "$m" || true; done
}

# bench_conflist DIR BRIDGE SUBNET: a CNI bridge network of the benchmark's own (Debian's plugins,
# host-local addresses from SUBNET kept in $work/ipam) as DIR/10-bench.conflist.
bench_conflist() {
  mkdir -p "$1"
  cat > "$1/10-bench.conflist" <<JSON
{"cniVersion": "0.4.0", "name": "crius-bench", "plugins": [{"type": "bridge", "bridge": "$2",
 "isGateway": true, "ipMasq": false, "ipam": {"type": "host-local", "ranges": [[{"subnet": "$3"}]],
 "dataDir": "$work/ipam"}}]}
JSON
}

# ms COMMAND...: the command's time in ms, printed; a failing command ends the run, its stderr shown.
ms() {
  local t0 t1
  t0=$(date +%s%N)
  "$@" >/dev/null 2>"$work/last.err" || { echo "failed: $*" >&2; cat "$work/last.err" >&2; exit 1; }
  t1=$(date +%s%N)
  awk -v ns=$((t1 - t0)) 'BEGIN {printf "%.1f\n", ns / 1e6}'
}

# median: the median of the numbers on stdin, one a line (the mean of the middle two for an even count).
median() { sort -n | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }

# bench_build [shim|runc]: the binaries the scripts run, in `bin` (and, with `shim`, the shim in `shim`); with
# `runc`, only crius-runc (the runtime benchmarks').
#   BENCH_BIN=DIR         takes them from DIR, no build (all five there, the shim too);
#   BENCH_PROFILE=debug   builds and takes the debug build (its figures are not release's: for a tiny check run);
#   otherwise             the release build; with `shim`, the shim as it ships (profile shim, static, as
#                         hack/bench-shim.sh and the Dockerfile build it), crius-runc beside it.
bench_build() {
  local bins=(--bin criusd --bin crius --bin containerd-shim-crius-v2 --bin crius-runc --bin crius-mkimage)
  local pkgs=(-p crius-daemon -p crius-cli -p crius-shim -p crius-runc -p crius-test-support)
  if [ "${1:-}" = runc ]; then bins=(--bin crius-runc) pkgs=(-p crius-runc); fi
  if [ -n "${BENCH_BIN:-}" ]; then
    bin=$(realpath "$BENCH_BIN") shim=$bin/containerd-shim-crius-v2
    return
  fi
  case ${BENCH_PROFILE:-release} in
    debug)
      cargo build --quiet "${pkgs[@]}" "${bins[@]}"
      bin=$PWD/target/debug shim=$bin/containerd-shim-crius-v2
      ;;
    release)
      cargo build --release --quiet "${pkgs[@]}" "${bins[@]}"
      bin=$PWD/target/release shim=$bin/containerd-shim-crius-v2
      if [ "${1:-}" = shim ]; then
        cargo rustc --profile shim --quiet -p crius-shim --bin containerd-shim-crius-v2 -- -C target-feature=+crt-static
        cp target/release/crius-runc target/shim/crius-runc
        shim=$PWD/target/shim/containerd-shim-crius-v2
      fi
      ;;
    *) echo "$(basename "$0"): BENCH_PROFILE is release or debug, not $BENCH_PROFILE" >&2; exit 2 ;;
  esac
}

# busybox_bundle DIR RUNTIME [FILE...]: an OCI bundle in DIR: a rootfs of the host's busybox (/bin/busybox,
# /bin/sh) with /proc, /dev, /sys and /tmp to mount on and each FILE copied into its /bin, and RUNTIME's
# default config.json (`RUNTIME spec`) with no terminal (the benchmarks run without a console socket) and a
# writable root, for the scripts to set the process in.
busybox_bundle() {
  local dir=$1 rt=$2 f
  mkdir -p "$dir/rootfs/bin" "$dir/rootfs/proc" "$dir/rootfs/dev" "$dir/rootfs/sys" "$dir/rootfs/tmp"
  cp /bin/busybox "$dir/rootfs/bin/"
  ln "$dir/rootfs/bin/busybox" "$dir/rootfs/bin/sh"
  for f in "${@:3}"; do cp "$f" "$dir/rootfs/bin/"; done
  (cd "$dir" && "$rt" spec)
  jq '.process.terminal = false | .root.readonly = false' "$dir/config.json" >"$dir/config.json.new"
  mv "$dir/config.json.new" "$dir/config.json"
}

# bench_images KIND ARCHIVE: the images a benchmark imports, made offline with crius-mkimage, as an archive:
# KIND `seeds` (the seed images) or `busybox` (docker.io/library/busybox:latest), each with a pause image.
bench_images() {
  case $1 in
    seeds) "$bin/crius-mkimage" seeds "$work/layout" >/dev/null ;;
    busybox) "$bin/crius-mkimage" busybox "$work/layout" docker.io/library/busybox:latest >/dev/null ;;
  esac
  "$bin/crius-mkimage" pause "$work/layout" registry.k8s.io/pause:3.6 >/dev/null
  "$bin/crius-mkimage" archive "$work/layout" "$2"
}

# containerd_toml FILE STATE SOCKET [CNI_CONF_DIR]: containerd 1.6's config for the comparison runs: root in
# $work/ctrd/root, state in STATE, its CRI plugin with runc (v2 shim), overlayfs and the pause stand-in, gRPC
# on SOCKET (ttrpc beside it), and CNI from CNI_CONF_DIR with Debian's plugins when given.
containerd_toml() {
  cat >"$1" <<TOML
version = 2
root = "$work/ctrd/root"
state = "$2"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.6"
  restrict_oom_score_adj = true
[plugins."io.containerd.grpc.v1.cri".containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
[grpc]
  address = "$3"
[ttrpc]
  address = "$3.ttrpc"
TOML
  if [ -n "${4:-}" ]; then
    cat >>"$1" <<TOML
[plugins."io.containerd.grpc.v1.cri".cni]
  bin_dir = "/usr/lib/cni"
  conf_dir = "$4"
TOML
  fi
}

# daemons_up CONTAINERD_SOCKET CRIUS_SOCKET...: waits (up to 10 s) for containerd to answer and each criusd
# socket to be there.
daemons_up() {
  local s ok
  for _ in $(seq 200); do
    ok=1
    for s in "${@:2}"; do [ -S "$s" ] || ok=; done
    [ -n "$ok" ] && ctr -a "$1" version >/dev/null 2>&1 && return 0
    sleep 0.05
  done
  return 0
}

# import_images ARCHIVE CONTAINERD_SOCKET CRIUS_SOCKET...: the archive imported on every daemon.
import_images() {
  local s
  for s in "${@:3}"; do "$bin/crius" --address "$s" images import "$1" >/dev/null; done
  ctr -a "$2" -n k8s.io images import "$1" >/dev/null
}

# shim_pids SOCKET: the shims a daemon started (their -address is its socket).
shim_pids() {
  local p
  for p in /proc/[0-9]*; do
    { tr '\0' ' ' <"$p/cmdline"; } 2>/dev/null | grep -q -- "shim.* -address $1 " && echo "${p#/proc/}"
  done
  return 0
}

# rss_kib PID, pss_kib PID: a process's resident and proportional set sizes, KiB (0 once it is gone).
rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }
pss_kib() { awk '/^Pss:/ {s += $2} END {print s + 0}' "/proc/$1/smaps_rollup" 2>/dev/null || echo 0; }
