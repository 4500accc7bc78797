# Builds the crius binaries. Not buildable on the development machines (no Docker engine there).
FROM rust:1.95-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends protobuf-compiler libseccomp-dev pkg-config \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cargo build --release --workspace --bins

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends libseccomp2 && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/target/release/crius-runc /src/target/release/criusd /src/target/release/crius /usr/local/bin/
ENTRYPOINT ["/usr/local/bin/criusd"]
