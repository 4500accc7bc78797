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
