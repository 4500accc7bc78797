//! Generates the client and server code of the project's own API from `proto/crius`.
fn main() {
    let protos = [
        "../../proto/crius/images/v1/images.proto",
        "../../proto/crius/pod/v1/pod.proto",
    ];
    for p in protos {
        println!("cargo:rerun-if-changed={p}");
    }
    tonic_prost_build::configure()
        .compile_protos(&protos, &["../../proto"])
        .unwrap_or_else(|e| {
            panic!("compiling {protos:?} (needs protoc: hack/install-deps.sh installs it): {e}")
        });
}
