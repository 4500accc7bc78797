#!/usr/bin/env bash
# The main job, for now the most complete thing crius can run: build crius-runc, make a busybox bundle, and
# walk a container through its life — run, create/start, exec, ps, pause/resume, stats, kill, delete.
# Needs root and hack/install-deps.sh. Leaves nothing behind (state, cgroups, mounts).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p crius-runc --quiet
runc=$PWD/target/release/crius-runc
work=$(mktemp -d /tmp/crius-demo.XXXXXX)
root=$work/state
trap '"$runc" --root "$root" delete --force demo >/dev/null 2>&1 || true; rm -rf "$work"' EXIT

mkdir -p "$work/rootfs/bin"
cp /bin/busybox "$work/rootfs/bin/"
for a in $("$work/rootfs/bin/busybox" --list); do ln -f "$work/rootfs/bin/busybox" "$work/rootfs/bin/$a" 2>/dev/null || true; done
(cd "$work" && "$runc" spec)
jq '.process.args = ["sh", "-c", "echo hello from $(hostname), pid $$; id; exit 3"] | .linux.cgroupsPath = "/crius-demo"' \
  "$work/config.json" > "$work/c.json" && mv "$work/c.json" "$work/config.json"

say() { printf '\n$ %s\n' "$*"; }
say crius-runc run demo
set +e; "$runc" --root "$root" run --bundle "$work" demo; echo "exit code: $?"; set -e

jq '.process.args = ["sleep", "1000"]' "$work/config.json" > "$work/c.json" && mv "$work/c.json" "$work/config.json"
say crius-runc create demo '&&' crius-runc start demo
"$runc" --root "$root" create --bundle "$work" demo </dev/null >/dev/null 2>&1
"$runc" --root "$root" state demo | jq -c '{id, status, pid}'
"$runc" --root "$root" start demo
"$runc" --root "$root" state demo | jq -c '{id, status, pid}'
say crius-runc exec demo sh -c "'ps; hostname'"
"$runc" --root "$root" exec demo sh -c 'ps; hostname'
say crius-runc pause demo '&&' crius-runc resume demo
"$runc" --root "$root" pause demo; "$runc" --root "$root" state demo | jq -r .status
"$runc" --root "$root" resume demo; "$runc" --root "$root" state demo | jq -r .status
say crius-runc events --stats demo
"$runc" --root "$root" events --stats demo | jq -c '{type, cpu_ns: .data.cpu.usage.total, pids: .data.pids.current}'
say crius-runc kill demo KILL '&&' crius-runc delete demo
"$runc" --root "$root" kill demo KILL
for _ in $(seq 100); do [ "$("$runc" --root "$root" state demo | jq -r .status)" = stopped ] && break; sleep 0.05; done
"$runc" --root "$root" delete demo
"$runc" --root "$root" list
