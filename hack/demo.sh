#!/usr/bin/env bash
# The main job: start criusd and apply a pod manifest from the seeds as written to its pod service — the Job
# whose log-agent is a native sidecar (tests/privileged/manifests/seed-job.yaml) — on a CNI bridge network, with the seed's images
# provided offline (stand-ins that `crius-mkimage seeds` builds: busybox plus a script each). The sidecar starts
# first, the migration runs to completion, then the worker; the worker's exit completes the pod, and only then
# is the sidecar stopped (SIGTERM: it flushes what it has not shipped). crius get, describe and logs show it
# as kubectl would; deleting the Job removes its pod.
# Needs root and hack/install-deps.sh. Leaves nothing behind (state, mounts, network, processes).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet -p crius-daemon -p crius-cli -p crius-shim -p crius-runc -p crius-test-support \
  --bin criusd --bin crius --bin containerd-shim-crius-v2 --bin crius-runc --bin crius-mkimage
bin=$PWD/target/release
work=$(mktemp -d /tmp/crius-demo.XXXXXX)
bridge=criusdemo$$
bridge=${bridge:0:15}
criusd_pid=
cleanup() {
  if [ -n "$criusd_pid" ]; then kill "$criusd_pid" 2>/dev/null || true; wait "$criusd_pid" 2>/dev/null || true; fi
  ip link del "$bridge" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

say() { printf '\n$ %s\n' "$*"; }
# A bridge network of the demo's own (Debian's CNI plugins), and the seed's images as an OCI archive.
mkdir -p "$work/net.d"
cat > "$work/net.d/10-demo.conflist" <<JSON
{"cniVersion": "1.0.0", "name": "crius-demo", "plugins": [{"type": "bridge", "bridge": "$bridge",
 "isGateway": true, "ipMasq": false, "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.212.0.0/24"}]],
 "dataDir": "$work/ipam"}}]}
JSON
"$bin/crius-mkimage" seeds "$work/layout" >/dev/null
"$bin/crius-mkimage" archive "$work/layout" "$work/seeds.tar"

# The pod service's logs in the demo's directory; images come from the archive, none is pulled.
printf '[pods]\nlog_root = "%s"\npull = "missing"\n' "$work/logs" > "$work/config.toml"
say criusd --config config.toml --root "$work/lib" --state "$work/run" --listen "$work/crius.sock" --cni-conf-dir "$work/net.d" '&'
"$bin/criusd" --config "$work/config.toml" --root "$work/lib" --state "$work/run" --listen "$work/crius.sock" \
  --cni-conf-dir "$work/net.d" --cni-plugin-dir /usr/lib/cni 2>"$work/criusd.log" &
criusd_pid=$!
export CRIUS_ADDRESS=$work/crius.sock
for _ in $(seq 100); do [ -S "$CRIUS_ADDRESS" ] && break; sleep 0.05; done
say crius images import seeds.tar
"$bin/crius" images import "$work/seeds.tar" >/dev/null
"$bin/crius" images ls

say cat seed-job.yaml
cat tests/privileged/manifests/seed-job.yaml
say crius apply -f fluent-bit-config.yaml -f seed-job.yaml
"$bin/crius" apply -f tests/privileged/manifests/fluent-bit-config.yaml -f tests/privileged/manifests/seed-job.yaml
# The pods live in criusd: crius returns at once, and the Job runs on.
for _ in $(seq 600); do
  [ "$("$bin/crius" get job data-processing-job -o jsonpath='{.status.succeeded}')" = 1 ] && break
  sleep 0.1
done
say crius get jobs
"$bin/crius" get jobs
say crius get pods -o wide
"$bin/crius" get pods -o wide
pod=$("$bin/crius" get pods -l job-name=data-processing-job -o jsonpath='{.items[0].metadata.name}')
say crius describe pod "$pod"
"$bin/crius" describe pod "$pod"
say crius logs "$pod" -c worker
"$bin/crius" logs "$pod" -c worker
say crius get pod "$pod" -o jsonpath='{.status.conditions}'
"$bin/crius" get pod "$pod" -o jsonpath='{.status.conditions}'; echo
say crius delete job data-processing-job
"$bin/crius" delete job data-processing-job

say kill -TERM criusd
kill "$criusd_pid"; wait "$criusd_pid"; echo "criusd exit code: $?"; criusd_pid=
grep -v ' INFO ' "$work/criusd.log" | sed 's/^/  criusd log: /' || true
# criusd's last line counts the records it kept (its journals under lib/ hold them).
left=$(grep -o 'sandboxes=[0-9]* containers=[0-9]*' "$work/criusd.log" | tail -1)
echo "records left: ${left:-unknown}; mounts left: $(grep -c "$work" /proc/self/mountinfo || true)"
