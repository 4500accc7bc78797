#!/usr/bin/env bash
# The one test entry point (README and .ci/run call it). Needs root and what hack/install-deps.sh installs.
#   1. static checks: rustfmt, clippy -D warnings, rustdoc -D warnings, cargo-deny (licences, duplicates); after
#      the build, the kind node's files (hack/kind/check.sh: hadolint, systemd-analyze verify)
#   2. unit tests (no root needed)
#   3. privileged tests on this host, with crius-runc and again with runc (which checks the tests themselves)
#   4. the cgroup-v2 suites (cgroup_v2, with crius-runc and with runc, and the vm_* test binaries) inside one VM
#      (hack/vm/run-in-vm.sh)
# Any failure stops the run with a non-zero exit. Nothing is skipped: a missing prerequisite fails loudly.
set -euo pipefail
cd "$(dirname "$0")/.."

# A CI build is from scratch: incremental caches would only take disk.
export CARGO_INCREMENTAL=${CARGO_INCREMENTAL:-0}
step() { printf '\n=== %s\n' "$*"; }
host_suites=(--test lifecycle --test runc_compat --test seccomp_notify --test isolation --test bad_input --test images --test image_store --test attacks_runtime --test attacks_mounts --test attacks_procfs)

step "rustfmt"
cargo fmt --all --check
step "clippy"
cargo clippy --workspace --all-targets --all-features -- -D warnings
step "rustdoc"
RUSTDOCFLAGS=-Dwarnings cargo doc --no-deps --workspace --quiet
step "cargo-deny: licences, duplicate crates, sources (deny.toml)"
cargo deny --log-level error check licenses bans sources

step "unit tests"
cargo test --workspace

step "build (binaries used by the privileged tests, and the static test program for the test images)"
cargo build --workspace --bins
cargo rustc -p crius-testprog --release --bin crius-testprog --quiet -- -C target-feature=+crt-static

step "the kind node's pieces that run without Docker: hadolint and the COPY sources of the Dockerfile, systemd-analyze verify of its units (hack/kind/check.sh)"
bash hack/kind/check.sh

step "privileged tests on the host: crius-runc (with runc's own measure: mount sources, device-rule order, read-only /dev, hook order, kill 0, exec inputs and exit codes, JSON, help and version, debug log, cgroup checks, no mount namespace, seccomp user notification), and the attacks on it (CVE-2019-5736, CVE-2024-21626, CVE-2021-30465, the masking, terminal and /proc-write races of CVE-2025-31133/52565/52881); the hostile-tenant attacks on criusd (tar header bombs, streaming memory, hanging port-forwards, connection floods, the shared PID namespace init, metrics cardinality, FIFOs at log paths, cgroup parents, the socket group); registry pulls (a stalled blob cancelled, at most max_concurrent_downloads in flight), OCI artifacts as image volumes, signature policies (cosign-style signatures made by the test), hostile images, 50 slow calls that must not starve criusd, gRPC clients (Debian's grpcio and PyPI's 1.85 with a percent-encoded :authority), criusd (images; pod sandboxes with CNI; a pod with hostUsers: false (its own mapped user namespace, idmapped rootfs and volumes) and crius-runc's idmapped bind mounts; the CRI 1.36 additions (a stop signal of SIGUSR1, UpdatePodSandboxResources, fields not acted on refused by name); device-plugin devices (nodes the test makes, rw, r with a write refused by the cgroup, a directory of them); CDI devices (a vendor spec with mknod nodes, a mount, env and a createContainer hook; a spec appearing between creates; an unknown device refused); NRI plugins (a pre-launched plugin's env and mount inside the container and its log of a pod's lifecycle, a refusal's message, a hung plugin costing about the timeout, a crashed one dropped); streaming exec, attach and port-forward; criusd SIGKILLed mid-churn, and with a pod service apply, a streaming exec or an image import in flight; 3 rounds of 200 pods), the shim (under containerd and over ttrpc), its direct exec compared with crius-runc exec (user, groups, capabilities, seccomp, cwd, env, exit codes, a terminal, a user namespace, a shared PID namespace, a stopped container), the pod service (the seed Job through crius apply, a bad manifest refused, the seed Deployment surviving a SIGKILL of criusd), criusd's metrics (the Prometheus endpoint after a pull and a busy pod; ListMetricDescriptors and ListPodSandboxMetrics; ImageFsInfo's container filesystem under [storage] container_root), and the kind node's criusd (its config on a kindnet-like ptp/host-local/portmap network, import from a pipe and tag, the preload script)"
cargo test -p crius-privileged-tests "${host_suites[@]}" --test pull --test artifacts --test signatures --test attacks_images --test starvation --test daemon --test grpc_clients --test pods --test cri_newer --test devices --test cdi --test nri --test userns --test timeouts --test streaming --test shim --test direct_exec --test engine --test pod_service --test chaos --test chaos_paths --test load --test attacks_host --test attacks_daemon --test attacks_streaming --test kind --test metrics -- --ignored
step "privileged tests on the host: runc (crius-only tests excepted)"
CRIUS_TEST_RUNTIME=runc cargo test -p crius-privileged-tests "${host_suites[@]}" -- --ignored --skip crius_only
step "runtime handlers on the host: pods on crius-runc (the default, and by name) and on runc ([runtimes.runc]), also after a criusd restart; an unknown handler is NotFound; Status lists them (crun's pod runs in the VM: it refuses hybrid cgroups)"
cargo test -p crius-privileged-tests --test runtime_handlers -- --ignored

step "cgroup v2 suites in one VM: cgroup_v2 with crius-runc, then runc; vm_shim (OOM reports, live updates, also under containerd); vm_pods (CRI resources set and updated live; UpdatePodSandboxResources in the pod cgroup); vm_engine (a seed pod's limits, its pod cgroup); vm_pod_service (the seed resize through crius patch: in place, restart, Deferred, Infeasible, Error below usage); vm_apparmor (RuntimeDefault crius-default, Localhost, Unconfined, ExecSync under the profile, on the direct exec path and through crius-runc exec); vm_runtime_handlers (pods on crun and runc); vm_metrics (a container's memory and fs io counters in ListPodSandboxMetrics; a busy container's PSI in ContainerStats and PodSandboxStats); vm_nri (an NRI plugin's cpu.weight at create and through UpdateContainers); vm_chaos_paths (criusd SIGKILLed with an UpdatePodSandboxResources in flight); vm_checkpoint (CRIU, with crius-runc: a counter restored goes on, --leave-running and a restore on another root, a dump CRIU refuses leaves the container running, a container with a terminal restored on a new pty sent to the new console socket); vm_cri_checkpoint (CheckpointContainer with CRIU, on crius-runc and on runc: a counter restored in another pod and on another criusd counts on, with its rootfs changes, also from a checkpoint image imported or pulled; a TCP connection CRIU cannot dump fails clearly and the container runs on)"
# The suites that need a pure cgroup-v2 kernel, each its own test binary: built here, run in the VM, which sees
# the target dir at the same path. vm_checkpoint runs with crius-runc only (runc passes it too: CRIUS_TEST_RUNTIME=runc),
# as CRIU is slow on the emulated CPU (seconds to half a minute a dump or restore), hence the longer timeout;
# vm_cri_checkpoint runs with both, as criusd's restore differs by runtime (the CRIU config it gives runc).
vm_suites=(cgroup_v2 vm_shim vm_pods vm_engine vm_pod_service vm_apparmor vm_runtime_handlers vm_metrics vm_nri vm_chaos_paths vm_checkpoint vm_cri_checkpoint)
declare -A vm_bin=()
while read -r name exe; do vm_bin[$name]=$exe; done < <(
  cargo test -p crius-privileged-tests "${vm_suites[@]/#/--test=}" --no-run --message-format=json-render-diagnostics |
    jq -r 'select(.profile.test == true and .executable != null) | "\(.target.name) \(.executable)"')
for s in "${vm_suites[@]}"; do
  [ -x "${vm_bin[$s]:-}" ] || { echo "could not build the VM test binary $s" >&2; exit 1; }
done
RUN_IN_VM_TIMEOUT=${RUN_IN_VM_TIMEOUT:-2700} hack/vm/run-in-vm.sh sh -c "
  '${vm_bin[cgroup_v2]}' --ignored --test-threads=1 &&
  CRIUS_TEST_RUNTIME=runc '${vm_bin[cgroup_v2]}' --ignored --test-threads=1 --skip crius_only &&
  '${vm_bin[vm_shim]}' --ignored --test-threads=1 &&
  '${vm_bin[vm_pods]}' --ignored --test-threads=1 &&
  '${vm_bin[vm_engine]}' --ignored --test-threads=1 &&
  '${vm_bin[vm_pod_service]}' --ignored --test-threads=1 &&
  '${vm_bin[vm_apparmor]}' --ignored --test-threads=1 &&
  '${vm_bin[vm_runtime_handlers]}' --ignored --test-threads=1 &&
  '${vm_bin[vm_metrics]}' --ignored --test-threads=1 &&
  '${vm_bin[vm_nri]}' --ignored --test-threads=1 &&
  '${vm_bin[vm_chaos_paths]}' --ignored --test-threads=1 &&
  '${vm_bin[vm_checkpoint]}' --ignored --test-threads=1 &&
  '${vm_bin[vm_cri_checkpoint]}' --ignored --test-threads=1 &&
  CRIUS_TEST_RUNTIME=runc '${vm_bin[vm_cri_checkpoint]}' --ignored --test-threads=1"

step "the systemd cgroup driver in a VM booted with systemd as PID 1: vm_systemd (a container is a delegated scope in its pod's kubepods slice, its limits unit properties; a live update keeps the pid and outlasts systemctl daemon-reload; removal leaves no unit)"
vm_systemd=$(cargo test -p crius-privileged-tests --test vm_systemd --no-run --message-format=json-render-diagnostics |
  jq -r 'select(.profile.test == true and .executable != null) | .executable')
[ -x "$vm_systemd" ] || { echo "could not build the VM test binary vm_systemd" >&2; exit 1; }
RUN_IN_VM_INIT=systemd RUN_IN_VM_TIMEOUT=${RUN_IN_VM_TIMEOUT:-600} hack/vm/run-in-vm.sh "$vm_systemd" --ignored --test-threads=1

step "all test groups passed (target dir: $(du -sh target | cut -f1))"
