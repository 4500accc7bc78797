//! Generates the NRI messages (`proto/nri/v1alpha1`) and ttrpc's envelope (`proto/ttrpc`) with prost. No service
//! code: crius-nri speaks ttrpc itself (src/ttrpc.rs) and dispatches methods by name.

fn main() {
    let protos = [
        "../../proto/nri/v1alpha1/api.proto",
        "../../proto/ttrpc/ttrpc.proto",
    ];
    for p in protos {
        println!("cargo:rerun-if-changed={p}");
    }
    prost_build::Config::new()
        .compile_protos(&protos, &["../../proto"])
        .unwrap_or_else(|e| {
            panic!("compiling {protos:?} (needs protoc: hack/install-deps.sh installs it): {e}")
        });
}
