//! Property test of layer unpacking: random, mostly hostile tar streams (`..` and absolute paths, symlinks out
//! of the layer and files written through them, hard links out or to nothing, whiteouts, opaque markers,
//! duplicate names, devices, odd modes and entry types, GNU long names, PAX records, lying sizes, truncation,
//! gzip, pure noise) go through `unpack`. It must return, Ok or Err, without panicking, and must touch nothing
//! outside the layer directory: a sentinel directory beside it and their common parent are checked after each
//! case. Runs as root or not: as a user, device nodes and chown fail, which is an Err like any other.

use std::io::Write as _;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use proptest::prelude::*;

/// Path components, hostile ones over-represented.
fn component() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => prop::sample::select(vec![
            "a", "b", "c", "..", ".", "", "l", "sentinel", ".wh.a", ".wh.b", ".wh.l", ".wh..wh..opq", ".wh.",
            ".wh..", ".wh...", "é", "dir with space",
        ])
        .prop_map(str::to_string),
        1 => "[a-c.]{0,4}",
    ]
}

/// Entry and link names: joined components, maybe absolute, maybe aimed at the sentinel by absolute path
/// (`{S}` stands for it), maybe past 100 bytes (a GNU long name).
fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        8 => (any::<u8>(), prop::collection::vec(component(), 1..4)).prop_map(|(lead, parts)| {
            let lead = match lead % 4 { 0 => "/", 1 => "./", _ => "" };
            format!("{lead}{}", parts.join("/"))
        }),
        1 => Just("{S}".to_string()),
        1 => Just("{S}/file".to_string()),
        1 => (1usize..40).prop_map(|n| format!("{}/f", "d".repeat(n * 5))),
    ]
}

#[derive(Debug, Clone)]
struct Entry {
    kind: u8,
    name: String,
    link: String,
    mode: u32,
    ids: (u64, u64),
    dev: (u32, u32),
    data: Vec<u8>,
    /// The size field, when it should lie about the data.
    size: Option<u64>,
    xattrs: Vec<(String, Vec<u8>)>,
    long_name: bool,
}

fn entry() -> impl Strategy<Value = Entry> {
    let kind = prop_oneof![
        6 => prop::sample::select(b"0552211344667".to_vec()),
        1 => any::<u8>(),
    ];
    let mode = prop_oneof![Just(0o644u32), Just(0o7777), Just(0), Just(0o4755), any::<u32>()];
    let xattr = (
        prop::sample::select(vec![
            "user.x",
            "trusted.overlay.opaque",
            "security.capability",
            "bogus",
            "",
        ]),
        prop::collection::vec(any::<u8>(), 0..8),
    )
        .prop_map(|(k, v)| (k.to_string(), v));
    (
        (kind, name(), name(), mode, (0u64..3, 0u64..3)),
        (
            (any::<u32>(), any::<u32>()),
            prop::collection::vec(any::<u8>(), 0..80),
            prop::option::weighted(0.1, prop_oneof![0u64..2000, Just(u64::MAX >> 1), any::<u64>()]),
            prop::collection::vec(xattr, 0..2),
            prop::bool::weighted(0.1),
        ),
    )
        .prop_map(
            |((kind, name, link, mode, ids), (dev, data, size, xattrs, long_name))| Entry {
                kind,
                name,
                link,
                mode,
                ids,
                dev,
                data,
                size,
                xattrs,
                long_name,
            },
        )
}

fn pad(out: &mut Vec<u8>) {
    out.resize(out.len().div_ceil(512) * 512, 0);
}

/// Writes one entry as raw blocks: the tar crate's builder refuses `..`, which is the point here.
fn write_entry(out: &mut Vec<u8>, e: &Entry, sentinel: &Path) {
    let resolve = |s: &str| s.replace("{S}", &sentinel.display().to_string());
    let (name, link) = (resolve(&e.name), resolve(&e.link));
    if !e.xattrs.is_empty() {
        let mut pax = Vec::new();
        for (k, v) in &e.xattrs {
            let rec = [format!(" SCHILY.xattr.{k}=").as_bytes(), v, b"\n"].concat();
            // The length prefix counts itself.
            let mut len = rec.len() + 1;
            while format!("{len}").len() + rec.len() != len {
                len += 1;
            }
            pax.extend_from_slice(format!("{len}").as_bytes());
            pax.extend_from_slice(&rec);
        }
        push_header(out, b"pax", b'x', pax.len() as u64, |_| {});
        out.extend_from_slice(&pax);
        pad(out);
    }
    if e.long_name || name.len() > 100 {
        let bytes = [name.as_bytes(), b"\0"].concat();
        push_header(out, b"././@LongLink", b'L', bytes.len() as u64, |_| {});
        out.extend_from_slice(&bytes);
        pad(out);
    }
    let size = e.size.unwrap_or(e.data.len() as u64);
    push_header(out, name.as_bytes(), e.kind, size, |h| {
        h.set_mode(e.mode);
        h.set_uid(e.ids.0);
        h.set_gid(e.ids.1);
        let old = h.as_old_mut();
        let n = link.len().min(100);
        old.linkname[..n].copy_from_slice(&link.as_bytes()[..n]);
        let _ = h.set_device_major(e.dev.0);
        let _ = h.set_device_minor(e.dev.1);
    });
    out.extend_from_slice(&e.data);
    pad(out);
}

fn push_header(out: &mut Vec<u8>, name: &[u8], kind: u8, size: u64, f: impl FnOnce(&mut tar::Header)) {
    let mut h = tar::Header::new_gnu();
    let n = name.len().min(100);
    h.as_old_mut().name[..n].copy_from_slice(&name[..n]);
    h.set_entry_type(tar::EntryType::new(kind));
    h.set_size(size);
    f(&mut h);
    h.set_cksum();
    out.extend_from_slice(h.as_bytes());
}

#[derive(Debug, Clone)]
enum Stream {
    Tar {
        entries: Vec<Entry>,
        cut: Option<usize>,
        gzip: bool,
    },
    Noise {
        magic: u8,
        bytes: Vec<u8>,
    },
}

fn stream() -> impl Strategy<Value = Stream> {
    prop_oneof![
        8 => (
            prop::collection::vec(entry(), 0..10),
            prop::option::weighted(0.15, any::<usize>()),
            prop::bool::weighted(0.1),
        )
            .prop_map(|(entries, cut, gzip)| Stream::Tar { entries, cut, gzip }),
        1 => (any::<u8>(), prop::collection::vec(any::<u8>(), 0..1500))
            .prop_map(|(magic, bytes)| Stream::Noise { magic, bytes }),
    ]
}

fn bytes(s: &Stream, sentinel: &Path) -> Vec<u8> {
    match s {
        Stream::Tar { entries, cut, gzip } => {
            let mut out = Vec::new();
            for e in entries {
                write_entry(&mut out, e, sentinel);
            }
            out.extend_from_slice(&[0; 1024]);
            if *gzip {
                let mut z = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
                z.write_all(&out).unwrap();
                out = z.finish().unwrap();
            }
            if let Some(cut) = cut {
                out.truncate(cut % (out.len() + 1));
            }
            out
        }
        Stream::Noise { magic, bytes } => {
            let lead: &[u8] = match magic % 4 {
                0 => &[0x1f, 0x8b],
                1 => &[0x28, 0xb5, 0x2f, 0xfd],
                _ => &[],
            };
            [lead, bytes].concat()
        }
    }
}

/// Every path under `dir` (not following symlinks) with its type, mode, size and link count; directories are
/// made searchable first, so an unprivileged run can walk and remove what a mode-0 entry left.
fn listing(dir: &Path) -> Vec<(PathBuf, u32, u64, u64)> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else { continue };
        for e in rd.flatten() {
            let p = e.path();
            let Ok(m) = std::fs::symlink_metadata(&p) else {
                continue;
            };
            if m.is_dir() {
                let _ = std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755));
                todo.push(p.clone());
            }
            out.push((p, m.mode(), m.size(), m.nlink()));
        }
    }
    out.sort();
    out
}

fn check(s: &Stream) -> Result<(), TestCaseError> {
    // On tmpfs where there is one: thousands of small trees are made and removed, which a disk makes slow.
    let root = match Path::new("/dev/shm") {
        shm if shm.is_dir() => tempfile::tempdir_in(shm),
        _ => tempfile::tempdir(),
    }
    .unwrap();
    let (dest, sentinel) = (root.path().join("layer"), root.path().join("sentinel"));
    std::fs::create_dir(&dest).unwrap();
    std::fs::create_dir_all(sentinel.join("sub")).unwrap();
    std::fs::write(sentinel.join("file"), b"keep").unwrap();
    let before = (listing(root.path()), listing(&sentinel));
    let input = bytes(s, &sentinel);
    let (tx, rx) = mpsc::channel();
    let d = dest.clone();
    std::thread::spawn(move || tx.send(crius_image::unpack::unpack(&input[..], &d).is_ok()));
    // A panic drops the sender: Disconnected. A hang: Timeout.
    let res = rx.recv_timeout(Duration::from_secs(20));
    prop_assert!(res.is_ok(), "unpack panicked or hung: {:?}", res);
    let walked = listing(&dest);
    prop_assert!(
        std::fs::symlink_metadata(&dest).is_ok_and(|m| m.is_dir()),
        "the layer dir is gone"
    );
    prop_assert_eq!(&listing(&sentinel), &before.1, "the sentinel changed");
    prop_assert_eq!(std::fs::read(sentinel.join("file")).unwrap(), b"keep");
    // The parent holds the same two entries (and nothing new); the layer's own mode and size may change.
    let top = |l: &[(PathBuf, u32, u64, u64)]| {
        l.iter()
            .filter(|(p, ..)| p.parent() == Some(root.path()))
            .map(|(p, m, ..)| (p.clone(), m & 0o170000))
            .collect::<Vec<_>>()
    };
    prop_assert_eq!(top(&listing(root.path())), top(&before.0));
    prop_assert!(walked.iter().all(|(p, ..)| p.starts_with(&dest)));
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 2000,
        max_shrink_iters: 200,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn unpack_stays_inside_the_layer(s in stream()) {
        check(&s)?;
    }
}
