//! Image manifests, indexes and configs against hostile input, bounded: arbitrary bytes and mutations of valid
//! documents go through what pull and import do with them (serde_json, then `manifest::{is_index,
//! pick_linux_amd64, diff_ids}` and `bounded::descriptor_size`), and whole OCI layouts whose index, manifest
//! or config was mutated (digests and sizes fixed up, so the mutation gets past the digest checks) go through
//! `import_layout`. Each case runs on a thread of its own under a counting allocator: it returns (Ok or Err,
//! no panic) within its time, holding at most a bounded multiple of its input. A corpus of regression inputs
//! comes first: nesting 100,000 deep, an index of 100,000 entries without a linux/amd64 one, sizes of
//! u64::MAX and 1e30, digests naming `../`, a layer that claims u64::MAX bytes.

use std::path::Path;
use std::time::Duration;

use crius_image::{Digest, Error, Store, bounded, import, manifest};
use proptest::prelude::*;
use serde_json::{Value, json};

mod common;

/// What a parse may hold: serde_json's values take some tens of bytes per element of the text.
fn bound(input: usize) -> usize {
    64 * input + (8 << 20)
}

/// Runs `f` on a thread of its own within `within`; its result and the most it held.
fn run<T: Send + 'static>(within: Duration, f: impl FnOnce() -> T + Send + 'static) -> (T, usize) {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(common::alloc::peak(f));
    });
    match rx.recv_timeout(within) {
        Ok(out) => out,
        Err(e) => panic!("the case panicked or took over {within:?}: {e}"),
    }
}

/// What pull and import do with a manifest, index or config's bytes; any error is fine.
fn read_document(bytes: &[u8]) {
    let Ok(v) = serde_json::from_slice::<Value>(bytes) else {
        return;
    };
    if manifest::is_index(&v) {
        let _ = manifest::pick_linux_amd64(&v, "index");
    }
    let _ = manifest::diff_ids(&v);
    let _ = bounded::descriptor_size(&v["config"], "config");
    for l in v["layers"].as_array().into_iter().flatten() {
        let _ = bounded::descriptor_size(l, "layer");
        let _ = Digest::parse(l["digest"].as_str().unwrap_or_default());
    }
}

fn check_document(bytes: Vec<u8>) {
    let n = bytes.len();
    let ((), peak) = run(Duration::from_secs(5), move || read_document(&bytes));
    assert!(peak < bound(n), "{peak} bytes held for {n} of input");
}

/// The documents of a valid layout of one image of one plain-tar layer: (index, manifest, config, layer).
fn documents() -> (Value, Value, Value, Vec<u8>) {
    let mut b = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_mode(0o644);
    h.set_size(2);
    b.append_data(&mut h, "etc/hi", &b"hi"[..]).unwrap();
    let layer = b.into_inner().unwrap();
    let config = json!({"architecture": "amd64", "os": "linux",
        "config": {"Cmd": ["sh"]}, "rootfs": {"type": "layers", "diff_ids": [Digest::of(&layer)]}});
    let manifest = json!({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": "", "size": 0},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": Digest::of(&layer),
                    "size": layer.len()}]});
    let index = json!({"schemaVersion": 2, "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json",
        "digest": "", "size": 0, "annotations": {"org.opencontainers.image.ref.name": "example.test/x:1"},
        "platform": {"os": "linux", "architecture": "amd64"}}]});
    (index, manifest, config, layer)
}

/// An edit of document `0` (index), `1` (manifest) or `2` (config).
type Edit<'a> = &'a dyn Fn(usize, &mut Value);

/// Writes the layout: the config, then the manifest with the config's digest and size, then the index with
/// the manifest's; `edit` changes each document after its descriptors were filled in, just before it is
/// written (so what it sets stays). Returns the bytes written.
fn write_layout(dir: &Path, docs: &(Value, Value, Value, Vec<u8>), edit: Edit<'_>) -> usize {
    let (mut index, mut manifest, mut config, layer) = docs.clone();
    let blobs = dir.join("blobs/sha256");
    std::fs::create_dir_all(&blobs).unwrap();
    let put = |bytes: &[u8]| {
        let d = Digest::of(bytes);
        std::fs::write(blobs.join(d.hex()), bytes).unwrap();
        (d, bytes.len())
    };
    put(&layer);
    edit(2, &mut config);
    let cfg = serde_json::to_vec(&config).unwrap();
    let (d, n) = put(&cfg);
    manifest["config"]["digest"] = json!(d);
    manifest["config"]["size"] = json!(n);
    edit(1, &mut manifest);
    let m = serde_json::to_vec(&manifest).unwrap();
    let (d, n2) = put(&m);
    index["manifests"][0]["digest"] = json!(d);
    index["manifests"][0]["size"] = json!(n2);
    edit(0, &mut index);
    let i = serde_json::to_vec(&index).unwrap();
    std::fs::write(dir.join("index.json"), &i).unwrap();
    std::fs::write(dir.join("oci-layout"), br#"{"imageLayoutVersion":"1.0.0"}"#).unwrap();
    layer.len() + cfg.len() + m.len() + i.len()
}

/// Imports the layout at `dir` into a fresh store; the result, within 10 s and a bounded heap.
fn check_import(dir: tempfile::TempDir, input: usize) -> Result<(), String> {
    let (r, peak) = run(Duration::from_secs(10), move || {
        let store = Store::open(&dir.path().join("store")).unwrap();
        import::import_layout(&store, &dir.path().join("layout"))
            .map(drop)
            .map_err(|e: Error| e.to_string())
    });
    assert!(peak < bound(input), "{peak} bytes held for {input} of input");
    r
}

fn tmp() -> tempfile::TempDir {
    match Path::new("/dev/shm") {
        shm if shm.is_dir() => tempfile::tempdir_in(shm),
        _ => tempfile::tempdir(),
    }
    .unwrap()
}

fn deep(n: usize) -> Vec<u8> {
    [vec![b'['; n], vec![b']'; n]].concat()
}

#[test]
fn the_corpus_returns_in_bounded_time_and_memory() {
    check_document(deep(100_000));
    check_document(format!("{{\"manifests\": {}}}", String::from_utf8(deep(100_000)).unwrap()).into_bytes());
    let many: Vec<Value> = (0..100_000)
        .map(|_| json!({"platform": {"os": "plan9"}}))
        .collect();
    check_document(serde_json::to_vec(&json!({"manifests": many})).unwrap());
    check_document(
        br#"{"config": {"size": 1e30}, "layers": [{"size": -1, "digest": "sha256:../../etc"}]}"#.to_vec(),
    );
    check_document(br#"{"rootfs": {"diff_ids": [1, null, {}, "sha256:..", "sha512:00"]}}"#.to_vec());

    let docs = documents();
    let deep100: Value = serde_json::from_slice(&deep(100)).unwrap();
    let cases: Vec<(&str, usize, &str, Value, &str)> = vec![
        (
            "config of u64::MAX bytes",
            1,
            "/config/size",
            json!(u64::MAX),
            "more than the 4194304",
        ),
        (
            "config size 1e30",
            1,
            "/config/size",
            json!(1e30),
            "descriptor without a size",
        ),
        (
            "manifest digest of ../",
            0,
            "/manifests/0/digest",
            json!("sha256:../../../../etc/passwd"),
            "64 lowercase hex",
        ),
        (
            "layer of u64::MAX bytes",
            1,
            "/layers/0/size",
            json!(u64::MAX),
            "size mismatch",
        ),
        ("diff ids nested", 2, "/rootfs/diff_ids", deep100, ""),
        (
            "no layers",
            1,
            "/layers",
            json!([]),
            "0 layers but the config lists 1 diff ids",
        ),
    ];
    for (what, doc, pointer, value, says) in cases {
        let dir = tmp();
        let edit = |d: usize, v: &mut Value| {
            if d == doc {
                *v.pointer_mut(pointer).unwrap() = value.clone();
            }
        };
        let n = write_layout(&dir.path().join("layout"), &docs, &edit);
        let e = check_import(dir, n).unwrap_err();
        assert!(e.contains(says), "{what}: {e}");
    }
    // The unchanged layout imports.
    let dir = tmp();
    let n = write_layout(&dir.path().join("layout"), &docs, &|_, _| {});
    check_import(dir, n).unwrap();
}

/// A hostile JSON value.
fn hostile() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(|f| json!(f)),
        prop::sample::select(vec![
            "",
            "sha256:",
            "sha256:../x",
            "linux",
            "amd64",
            "application/vnd.oci.image.index.v1+json",
            "sha256:0000000000000000000000000000000000000000000000000000000000000000",
        ])
        .prop_map(Value::from),
        ".{0,20}".prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(
                prop::sample::select(vec![
                    "digest",
                    "size",
                    "manifests",
                    "layers",
                    "config",
                    "platform",
                    "os",
                    "architecture",
                    "rootfs",
                    "diff_ids",
                    "mediaType",
                    "annotations",
                ])
                .prop_map(String::from),
                inner,
                0..5
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Where in the three documents a hostile value goes.
fn place() -> impl Strategy<Value = (usize, &'static str)> {
    prop::sample::select(vec![
        (0, "/manifests"),
        (0, "/manifests/0"),
        (0, "/manifests/0/platform"),
        (0, "/manifests/0/size"),
        (0, "/manifests/0/digest"),
        (1, "/config"),
        (1, "/config/size"),
        (1, "/layers"),
        (1, "/layers/0"),
        (1, "/layers/0/size"),
        (1, "/layers/0/digest"),
        (1, "/mediaType"),
        (2, "/rootfs"),
        (2, "/rootfs/diff_ids"),
        (2, "/rootfs/diff_ids/0"),
    ])
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 400,
        max_shrink_iters: 100,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// Bytes: noise, and valid documents with bytes flipped or cut.
    #[test]
    fn documents_of_any_bytes_are_read_without_panic(
        noise in prop::collection::vec(any::<u8>(), 0..512),
        flips in prop::collection::vec((any::<usize>(), 1u8..), 0..4),
        cut in any::<usize>(),
        which in 0usize..3,
    ) {
        check_document(noise);
        let d = documents();
        let mut bytes = serde_json::to_vec([&d.0, &d.1, &d.2][which]).unwrap();
        for (at, x) in flips {
            let i = at % bytes.len();
            bytes[i] ^= x;
        }
        bytes.truncate(cut % (bytes.len() + 1));
        check_document(bytes);
    }

    /// Whole layouts with hostile values put into their index, manifest or config, descriptors fixed up.
    #[test]
    fn layouts_with_hostile_documents_import_or_fail_without_panic(
        edits in prop::collection::vec((place(), hostile()), 1..4),
    ) {
        let edit = |d: usize, target: &mut Value| {
            for ((doc, pointer), v) in &edits {
                if let Some(slot) = target.pointer_mut(pointer).filter(|_| *doc == d) {
                    *slot = v.clone();
                }
            }
        };
        let dir = tmp();
        let n = write_layout(&dir.path().join("layout"), &documents(), &edit);
        let _ = check_import(dir, n);
    }
}
