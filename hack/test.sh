#!/usr/bin/env bash
# The one test entry point (README and .ci/run call it). Needs root and what hack/install-deps.sh installs.
#   1. static checks: rustfmt, clippy -D warnings, rustdoc -D warnings, cargo-deny (licences, duplicates)
#   2. unit tests (no root needed)
#   3. privileged tests on this host, with crius-runc and again with runc (which checks the tests themselves)
#   4. the cgroup-v2 group inside a VM (hack/vm/run-in-vm.sh), with crius-runc and with runc
# Any failure stops the run with a non-zero exit. Nothing is skipped: a missing prerequisite fails loudly.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n=== %s\n' "$*"; }
host_suites=(--test lifecycle --test isolation --test bad_input --test images --test image_store)

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

step "privileged tests on the host: crius-runc; registry pulls, criusd (images; pod sandboxes with CNI), and the shim (under containerd and over ttrpc)"
cargo test -p crius-privileged-tests "${host_suites[@]}" --test pull --test daemon --test pods --test timeouts --test shim --test engine -- --ignored --skip vm_
step "privileged tests on the host: runc (crius-only tests excepted)"
CRIUS_TEST_RUNTIME=runc cargo test -p crius-privileged-tests "${host_suites[@]}" -- --ignored --skip crius_only

step "cgroup v2 tests in the VM: crius-runc, then runc; the shim's OOM reports and live updates (also under containerd); CRI resources set and updated live; a seed pod's limits"
test_binary() {
  cargo test -p crius-privileged-tests --test "$1" --no-run --message-format=json 2>/dev/null |
    jq -r --arg t "$1" 'select(.profile.test == true and .target.name == $t) | .executable' | tail -n1
}
vm_test=$(test_binary cgroup_v2)
shim_test=$(test_binary shim)
pods_test=$(test_binary pods)
engine_test=$(test_binary engine)
[ -x "$vm_test" ] && [ -x "$shim_test" ] && [ -x "$pods_test" ] && [ -x "$engine_test" ] || { echo "could not find the VM test binaries" >&2; exit 1; }
RUN_IN_VM_TIMEOUT=${RUN_IN_VM_TIMEOUT:-1500} hack/vm/run-in-vm.sh sh -c "
  '$vm_test' --ignored --test-threads=1 &&
  CRIUS_TEST_RUNTIME=runc '$vm_test' --ignored --test-threads=1 --skip crius_only &&
  '$shim_test' --ignored --test-threads=1 vm_ &&
  '$pods_test' --ignored --test-threads=1 vm_ &&
  '$engine_test' --ignored --test-threads=1 vm_"

step "all test groups passed"
