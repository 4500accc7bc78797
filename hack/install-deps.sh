#!/usr/bin/env bash
# The one place that installs what crius needs to build, test and benchmark on Debian 12 (bookworm).
# Used by the README and by .ci/run. Idempotent; needs root.
set -euo pipefail

packages=(
  # build
  pkg-config libseccomp-dev protobuf-compiler
  # test rootfs and images
  busybox-static
  # the cgroup-v2 VM (hack/vm): qemu + virtiofsd, Debian's cloud kernel, initramfs tools
  qemu-system-x86 linux-image-cloud-amd64 cpio kmod lz4 binutils
  # reference runtimes the tests and benchmarks compare against
  runc crun containerd
  # tools used by tests and benchmarks (skopeo and umoci read the test images as real clients do)
  iproute2 util-linux procps hyperfine jq skopeo umoci
  # pod networks: the standard CNI plugins (bridge, host-local, portmap, loopback) in /usr/lib/cni
  containernetworking-plugins
  # a real registry for pull tests, on 127.0.0.1 (htpasswd from apache2-utils for its basic-auth mode)
  docker-registry apache2-utils
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

rustup component list --installed 2>/dev/null | grep -q '^clippy' || rustup component add clippy rustfmt

# cargo-deny checks licences, duplicate crates and sources (hack/test.sh; deny.toml). Built from crates.io once.
command -v cargo-deny >/dev/null || cargo install --locked --quiet cargo-deny@0.20.2
