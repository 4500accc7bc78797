# Builds the crius binaries (the default, last stage: an image with criusd), and a kind node image that runs crius
# in containerd's place (`--target kind-node`, hack/kind/README.md). Not buildable on the development machines (no
# Docker engine there): hack/kind/check.sh checks this file's instructions and COPY sources instead.
# The kind node image crius goes into: pinned by tag (Kubernetes 1.36).
ARG KIND_NODE_IMAGE=kindest/node:v1.36.0

FROM rust:1.95-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends protobuf-compiler libseccomp-dev pkg-config \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cargo build --release --workspace --bins
# The shim runs once per pod: built for size and linked statically (no libc.so mapped), it stays under 2 MB RSS.
RUN cargo rustc --profile shim -p crius-shim --bin containerd-shim-crius-v2 -- -C target-feature=+crt-static

# A kind node with criusd serving containerd's socket; containerd's unit is replaced (criusd.service is its alias).
FROM ${KIND_NODE_IMAGE} AS kind-node
ARG TARGETARCH=amd64
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
COPY --from=build /src/target/release/crius-runc /src/target/release/criusd /src/target/release/crius \
     /src/target/shim/containerd-shim-crius-v2 /usr/local/bin/
COPY hack/kind/criusd.toml /etc/crius/config.toml
COPY hack/kind/crictl.yaml /etc/crictl.yaml
COPY hack/kind/criusd.service hack/kind/crius-preload.service /etc/systemd/system/
COPY hack/kind/preload-images.sh /usr/local/bin/crius-kind-preload
COPY hack/kind/README.md /usr/local/share/doc/crius/kind/README.md
# criusd links libseccomp dynamically, and its systemd cgroup driver talks to systemd over the D-Bus system bus:
# the node image may lack either.
RUN missing=(); ldconfig -p | grep -q 'libseccomp\.so\.2' || missing+=(libseccomp2); \
    command -v dbus-daemon >/dev/null || missing+=(dbus); \
    if [ "${#missing[@]}" -gt 0 ]; then \
      apt-get update && apt-get install -y --no-install-recommends "${missing[@]}" && rm -rf /var/lib/apt/lists/*; \
    fi
# kind pulled the node's images into containerd's store when it built the base image: they are exported once, as
# the archive crius-preload.service imports into crius's store at first boot (before kubelet starts).
RUN set -eu; \
    containerd >/tmp/containerd.log 2>&1 & pid=$!; \
    i=0; until ctr version >/dev/null 2>&1; do \
      i=$((i + 1)); if [ "$i" -gt 100 ]; then cat /tmp/containerd.log; exit 1; fi; sleep 0.1; \
    done; \
    mkdir -p /kind/images; \
    ctr --namespace=k8s.io images ls -q | grep -v '@' | \
      xargs ctr --namespace=k8s.io images export --platform "linux/${TARGETARCH}" /kind/images/preloaded.tar; \
    kill "$pid"; wait "$pid" || true; rm -f /tmp/containerd.log
RUN systemctl disable containerd.service \
    && rm -f /etc/systemd/system/containerd.service \
    && systemctl enable criusd.service crius-preload.service

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends libseccomp2 && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/target/release/crius-runc /src/target/release/criusd /src/target/release/crius \
     /src/target/shim/containerd-shim-crius-v2 /usr/local/bin/
ENTRYPOINT ["/usr/local/bin/criusd"]
