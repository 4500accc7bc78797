//! Generates the client and server code of the project's own API from `proto/crius`, and of the CRI
//! (`runtime.v1`) from the project's transcription of it in `proto/cri`; and the list of every method they
//! define (`grpc_methods.rs`), so that criusd's metrics label only methods that exist.

/// `/package.Service/Method` of every `rpc` in `text`, a .proto file (one declaration per line, as ours are).
fn methods(text: &str) -> Vec<String> {
    let (mut package, mut service, mut out) = (String::new(), String::new(), Vec::new());
    for line in text.lines().map(str::trim) {
        let word = |rest: &str| {
            rest.split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '.'))
                .next()
                .unwrap_or_default()
                .to_string()
        };
        if let Some(rest) = line.strip_prefix("package ") {
            package = word(rest);
        } else if let Some(rest) = line.strip_prefix("service ") {
            service = word(rest);
        } else if let Some(rest) = line.strip_prefix("rpc ") {
            out.push(format!("/{package}.{service}/{}", word(rest)));
        }
    }
    out
}

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
    let mut all = Vec::new();
    for p in protos {
        let text = std::fs::read_to_string(p).unwrap_or_else(|e| panic!("reading {p}: {e}"));
        all.extend(methods(&text));
    }
    all.sort();
    let list: String = all.iter().map(|m| format!("    {m:?},\n")).collect();
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR")).join("grpc_methods.rs");
    std::fs::write(&out, format!("&[\n{list}]\n"))
        .unwrap_or_else(|e| panic!("writing {}: {e}", out.display()));
}
