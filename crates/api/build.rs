//! Generates the client and server code of the project's own API from `proto/crius`.
fn main() {
    let proto = "../../proto/crius/images/v1/images.proto";
    println!("cargo:rerun-if-changed={proto}");
    tonic_prost_build::configure()
        .compile_protos(&[proto], &["../../proto"])
        .unwrap_or_else(|e| {
            panic!("compiling {proto} (needs protoc: hack/install-deps.sh installs it): {e}")
        });
}
