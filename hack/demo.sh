#!/usr/bin/env bash
# The main job, for now the most complete thing crius can run: start criusd, import a busybox image offline and
# manage it with the crius CLI (the CRI ImageService underneath); then build a busybox bundle and walk a container
# through its life with crius-runc — run, create/start, exec, ps, pause/resume, stats, kill, delete.
# Needs root and hack/install-deps.sh. Leaves nothing behind (state, cgroups, mounts, processes).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet -p crius-runc -p crius-daemon -p crius-cli -p crius-test-support \
  --bin crius-runc --bin criusd --bin crius --bin crius-mkimage
bin=$PWD/target/release
runc=$bin/crius-runc
work=$(mktemp -d /tmp/crius-demo.XXXXXX)
root=$work/state
criusd_pid=
cleanup() {
  "$runc" --root "$root" delete --force demo >/dev/null 2>&1 || true
  if [ -n "$criusd_pid" ]; then kill "$criusd_pid" 2>/dev/null || true; wait "$criusd_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

say() { printf '\n$ %s\n' "$*"; }
# criusd on its own directories; the CLI finds it through CRIUS_ADDRESS.
"$bin/crius-mkimage" busybox "$work/layout" busybox:1.36 >/dev/null
"$bin/crius-mkimage" archive "$work/layout" "$work/busybox.tar"
say criusd --root "$work/lib" --state "$work/run" --listen "$work/crius.sock" '&'
"$bin/criusd" --root "$work/lib" --state "$work/run" --listen "$work/crius.sock" 2>"$work/criusd.log" &
criusd_pid=$!
export CRIUS_ADDRESS=$work/crius.sock
for _ in $(seq 100); do [ -S "$CRIUS_ADDRESS" ] && break; sleep 0.05; done
say crius images import "$work/busybox.tar"
"$bin/crius" images import "$work/busybox.tar"
say crius images ls --digests
"$bin/crius" images ls --digests
say crius images inspect busybox:1.36 '|' jq '{id: .status.id, tags: .status.repoTags, cmd: .info.imageSpec.config.Cmd}'
"$bin/crius" images inspect busybox:1.36 | jq -c '{id: .status.id, tags: .status.repoTags, cmd: .info.imageSpec.config.Cmd}'
say crius images rm busybox:1.36
"$bin/crius" images rm busybox:1.36
say kill -TERM criusd
kill "$criusd_pid"; wait "$criusd_pid"; echo "criusd exit code: $?"; criusd_pid=
sed 's/^/  criusd log: /' "$work/criusd.log"

mkdir -p "$work/rootfs/bin"
cp /bin/busybox "$work/rootfs/bin/"
for a in $("$work/rootfs/bin/busybox" --list); do ln -f "$work/rootfs/bin/busybox" "$work/rootfs/bin/$a" 2>/dev/null || true; done
(cd "$work" && "$runc" spec)
jq '.process.args = ["sh", "-c", "echo hello from $(hostname), pid $$; id; exit 3"] | .linux.cgroupsPath = "/crius-demo"' \
  "$work/config.json" > "$work/c.json" && mv "$work/c.json" "$work/config.json"

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
