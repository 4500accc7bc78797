//! Generates the client and server code of the project's own API from `proto/crius`, and of the CRI
//! (`runtime.v1`) from the project's transcription of it in `proto/cri`.
fn main() {
    let protos = [
        "../../proto/crius/images/v1/images.proto",
        "../../proto/crius/pod/v1/pod.proto",
        "../../proto/cri/runtime/v1/api.proto",
    ];
    for p in protos {
        println!("cargo:rerun-if-changed={p}");
    }
    tonic_prost_build::configure()
        // CRI messages are also shown as JSON (verbose ContainerStatus's `info.config`, as containerd does).
        .type_attribute(".runtime.v1", "#[derive(serde::Serialize, serde::Deserialize)]")
        // An environment value is bytes on the wire since CRI 1.36: shown as text, as it was before.
        .field_attribute(
            ".runtime.v1.KeyValue.value",
            "#[serde(with = \"crate::env_text\")]",
        )
        .compile_protos(&protos, &["../../proto"])
        .unwrap_or_else(|e| {
            panic!("compiling {protos:?} (needs protoc: hack/install-deps.sh installs it): {e}")
        });
}
