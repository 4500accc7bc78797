//! Layer unpacking against bombs, bounded: a corpus of regression inputs (a GNU long name or long link header
//! saying 2 GiB, made lazily and gzip-compressed as it is read, so neither the test nor the unpacker holds
//! it; a PAX header whose size field is huge; a PAX `size` record far past the stream; a name of PATH_MAX+1;
//! whiteouts of `..`; an endless GNU sparse extension chain; a layer past the entry and byte caps), then
//! proptest mutations of valid layers (bytes flipped, size fields and type flags rewritten, cut short). Each
//! case runs on a thread of its own under a counting allocator: it must return (no panic) within its time,
//! and the most that thread had allocated at once must stay under a bound that the caps imply.

use std::io::Read;
use std::path::Path;
use std::time::{Duration, Instant};

use crius_image::Error;
use crius_image::gate::{HEADERS_BUDGET, Limits, MAX_EXTENSION, PATH_MAX};
use proptest::prelude::*;

mod common;

/// The most one unpack may hold at once: the buffers of the readers (8 KiB, gzip's 32 KiB window), the
/// extension headers the tar reader keeps (at most three of [`MAX_EXTENSION`]) and its sparse block lists
/// (bounded by [`HEADERS_BUDGET`]), with room to spare, and far below the GiBs a bomb claims.
const MEMORY_BOUND: usize = 4 << 20;

/// Runs unpack of `input` under `limits` on a thread of its own; its result (Ok or the error) and the most
/// it held allocated. Fails the test on a panic or on a run longer than `within`.
fn run(input: Box<dyn Read + Send>, limits: Limits, within: Duration) -> (Result<(), Error>, usize) {
    let root = match Path::new("/dev/shm") {
        shm if shm.is_dir() => tempfile::tempdir_in(shm),
        _ => tempfile::tempdir(),
    }
    .unwrap();
    let dest = root.path().join("layer");
    std::fs::create_dir(&dest).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let (r, peak) = common::alloc::peak(|| {
            crius_image::unpack::unpack_layer(input, &dest, "layer sha256:test", &limits).map(drop)
        });
        let _ = tx.send((r, peak));
    });
    let t = Instant::now();
    let out = rx.recv_timeout(within);
    assert!(out.is_ok(), "unpack panicked or took over {within:?}: {out:?}");
    assert!(t.elapsed() < within);
    out.unwrap()
}

/// A tar header block: `name`, type `kind`, `size` in its size field.
fn header(name: &[u8], kind: u8, size: u64) -> Vec<u8> {
    let mut h = tar::Header::new_gnu();
    let n = name.len().min(100);
    h.as_old_mut().name[..n].copy_from_slice(&name[..n]);
    h.set_entry_type(tar::EntryType::new(kind));
    h.set_mode(0o644);
    h.set_size(size);
    h.set_cksum();
    h.as_bytes().to_vec()
}

/// `bytes` padded to whole blocks.
fn padded(mut bytes: Vec<u8>) -> Vec<u8> {
    bytes.resize(bytes.len().div_ceil(512) * 512, 0);
    bytes
}

/// A PAX extension header carrying `records` (`key=value`), as blocks.
fn pax(records: &[(&str, &str)]) -> Vec<u8> {
    let mut body = Vec::new();
    for (k, v) in records {
        let rec = format!(" {k}={v}\n");
        let mut len = rec.len() + 1;
        while format!("{len}").len() + rec.len() != len {
            len += 1;
        }
        body.extend_from_slice(format!("{len}{rec}").as_bytes());
    }
    [header(b"pax", b'x', body.len() as u64), padded(body)].concat()
}

/// `head` and then zeros without end: a stream that says what a bomb says without being one on disk.
fn endless(head: Vec<u8>) -> Box<dyn Read + Send> {
    Box::new(std::io::Cursor::new(head).chain(std::io::repeat(0)))
}

/// The same, gzip-compressed as it is read (2 GiB of zeros would be about 2 MB).
fn endless_gz(head: Vec<u8>) -> Box<dyn Read + Send> {
    Box::new(flate2::read::GzEncoder::new(
        endless(head),
        flate2::Compression::fast(),
    ))
}

fn refused(r: &Result<(), Error>, says: &str) {
    match r {
        Err(e @ Error::LayerRefused { layer, .. }) => {
            assert_eq!(layer, "layer sha256:test");
            assert!(e.to_string().contains(says), "{e}");
        }
        other => panic!("expected a refusal saying {says:?}, got {other:?}"),
    }
}

const SECOND: Duration = Duration::from_secs(1);

#[test]
fn gnu_long_name_and_long_link_headers_of_2_gib_are_refused_before_their_body_is_read() {
    for (kind, what) in [(b'L', "GNU long name"), (b'K', "GNU long link")] {
        let head = header(b"././@LongLink", kind, 2 << 30);
        for input in [endless(head.clone()), endless_gz(head)] {
            let (r, peak) = run(input, Limits::default(), 5 * SECOND);
            refused(
                &r,
                &format!("a {what} header of 2147483648 bytes, more than the 65536"),
            );
            assert!(peak < MEMORY_BOUND, "{what}: held {peak} bytes");
        }
    }
}

#[test]
fn a_pax_header_of_a_huge_size_is_refused_and_so_is_one_just_over_the_cap() {
    for size in [u64::MAX >> 2, 1 << 40, MAX_EXTENSION + 1] {
        let (r, peak) = run(endless(header(b"pax", b'x', size)), Limits::default(), 5 * SECOND);
        refused(&r, &format!("a PAX header of {size} bytes"));
        assert!(peak < MEMORY_BOUND, "held {peak} bytes");
    }
    // One at the cap is read.
    let body = padded(vec![b'\n'; MAX_EXTENSION as usize]);
    let input = [header(b"pax", b'x', MAX_EXTENSION), body, vec![0; 1024]].concat();
    let (r, _) = run(
        Box::new(std::io::Cursor::new(input)),
        Limits::default(),
        5 * SECOND,
    );
    assert!(!matches!(r, Err(Error::LayerRefused { .. })), "{r:?}");
}

#[test]
fn a_pax_size_record_past_the_stream_reads_to_the_byte_cap_and_no_further() {
    let head = [pax(&[("size", "999999999999999")]), header(b"file", b'0', 1)].concat();
    let limits = Limits {
        max_bytes: 8 << 20,
        ..Limits::default()
    };
    let (r, peak) = run(endless(head), limits, 10 * SECOND);
    refused(
        &r,
        "more than 8388608 bytes of uncompressed tar, the cap ([image] max_layer_bytes)",
    );
    assert!(peak < MEMORY_BOUND, "held {peak} bytes");
}

#[test]
fn names_of_path_max_and_more_are_refused_shorter_long_ones_are_not() {
    for (len, refuse) in [(PATH_MAX + 1, true), (PATH_MAX, true), (300, false)] {
        let name: Vec<u8> = (0..len)
            .map(|i| if i % 100 == 99 { b'/' } else { b'd' })
            .collect();
        let long = [name.clone(), vec![0]].concat();
        let input = [
            header(b"././@LongLink", b'L', long.len() as u64),
            padded(long),
            header(b"x", b'0', 0),
            vec![0; 1024],
        ]
        .concat();
        let (r, _) = run(
            Box::new(std::io::Cursor::new(input)),
            Limits::default(),
            5 * SECOND,
        );
        if refuse {
            refused(
                &r,
                &format!("an entry name of {len} bytes, more than PATH_MAX (4096)"),
            );
        } else {
            r.unwrap();
        }
    }
}

#[test]
fn whiteouts_of_dot_dot_are_refused() {
    for name in [&b".wh.."[..], b"a/.wh..", b"../.wh.x", b"a/../../.wh.etc"] {
        let input = [header(name, b'0', 0), vec![0; 1024]].concat();
        let (r, _) = run(
            Box::new(std::io::Cursor::new(input)),
            Limits::default(),
            5 * SECOND,
        );
        assert!(matches!(r, Err(Error::UnsafeEntry { .. })), "{name:?}: {r:?}");
    }
}

#[test]
fn an_endless_gnu_sparse_extension_chain_stops_at_the_headers_budget() {
    let mut h = tar::Header::new_gnu();
    h.as_old_mut().name[..6].copy_from_slice(b"sparse");
    h.set_entry_type(tar::EntryType::GNUSparse);
    h.set_size(0);
    h.as_gnu_mut().unwrap().isextended[0] = 1;
    h.set_cksum();
    // Extension blocks, each extended again, each listing 21 empty chunks at growing offsets.
    let mut ext = Vec::new();
    for b in 0..1024u64 {
        let mut block = vec![0u8; 512];
        for i in 0..21u64 {
            let off = format!("{:011o}\0", 1 + b * 21 + i);
            block[i as usize * 24..i as usize * 24 + 12].copy_from_slice(off.as_bytes());
            block[i as usize * 24 + 12..i as usize * 24 + 24].copy_from_slice(b"00000000000\0");
        }
        block[504] = 1;
        ext.extend(block);
    }
    let repeat: Box<dyn Read + Send> = Box::new(
        std::io::Cursor::new(h.as_bytes().to_vec())
            .chain(std::io::Cursor::new(ext).chain(std::io::repeat(0))),
    );
    let (r, peak) = run(repeat, Limits::default(), 5 * SECOND);
    // 1024 blocks (512 KiB) of chain: the tar reader stops at the budget, holding the lists of half of them.
    refused(
        &r,
        &format!("more than {HEADERS_BUDGET} bytes of headers for one entry, the cap"),
    );
    assert!(peak < MEMORY_BOUND, "held {peak} bytes");
}

#[test]
fn layers_past_the_entry_and_byte_caps_are_refused() {
    let limits = Limits {
        max_bytes: 1 << 20,
        max_entries: 10,
    };
    let many: Vec<u8> = (0..11)
        .flat_map(|i| header(format!("f{i}").as_bytes(), b'0', 0))
        .chain([0; 1024])
        .collect();
    let (r, _) = run(Box::new(std::io::Cursor::new(many)), limits, 5 * SECOND);
    refused(&r, "more than 10 entries, the cap ([image] max_layer_entries)");
    let (r, peak) = run(endless_gz(header(b"big", b'0', 1 << 30)), limits, 5 * SECOND);
    refused(&r, "more than 1048576 bytes of uncompressed tar");
    assert!(peak < MEMORY_BOUND, "held {peak} bytes");
    // Zeros after the end of the archive count too: a layer cannot be an endless tail.
    let (r, _) = run(endless(vec![0; 1024]), limits, 5 * SECOND);
    refused(&r, "more than 1048576 bytes of uncompressed tar");
}

/// A valid layer: a directory, files, a symlink, a hard link, a long name, PAX xattrs.
fn valid_layer() -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    let mut dir = tar::Header::new_gnu();
    dir.set_entry_type(tar::EntryType::Directory);
    dir.set_mode(0o755);
    dir.set_size(0);
    b.append_data(&mut dir, "etc", &[][..]).unwrap();
    let mut f = tar::Header::new_gnu();
    f.set_mode(0o644);
    f.set_size(5);
    b.append_data(&mut f.clone(), "etc/passwd", &b"root\n"[..])
        .unwrap();
    b.append_data(&mut f.clone(), format!("etc/{}", "n".repeat(150)), &b"long!"[..])
        .unwrap();
    let mut l = tar::Header::new_gnu();
    l.set_entry_type(tar::EntryType::Symlink);
    l.set_size(0);
    b.append_link(&mut l, "etc/link", "passwd").unwrap();
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Link);
    h.set_size(0);
    b.append_link(&mut h, "etc/hard", "etc/passwd").unwrap();
    b.append_pax_extensions([("SCHILY.xattr.user.a", &b"1"[..])])
        .unwrap();
    b.append_data(&mut f, "etc/x", &b"xattr"[..]).unwrap();
    b.into_inner().unwrap()
}

#[derive(Debug, Clone)]
enum Mutation {
    /// Byte `at` (modulo the length) xor `with`.
    Flip { at: usize, with: u8 },
    /// The size field of the header block `block` (modulo the count) set to `size`.
    Size { block: usize, size: u64 },
    /// The type flag of header block `block` set to one of the extension types.
    Kind { block: usize, kind: u8 },
    /// Cut at `at`.
    Cut { at: usize },
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        3 => (any::<usize>(), 1u8..).prop_map(|(at, with)| Mutation::Flip { at, with }),
        3 => (any::<usize>(), prop_oneof![Just(2u64 << 30), Just(MAX_EXTENSION + 1), 0u64..4096, any::<u64>()])
            .prop_map(|(block, size)| Mutation::Size { block, size }),
        2 => (any::<usize>(), prop::sample::select(b"LKxgS0571".to_vec()))
            .prop_map(|(block, kind)| Mutation::Kind { block, kind }),
        1 => any::<usize>().prop_map(|at| Mutation::Cut { at }),
    ]
}

fn mutate(mut t: Vec<u8>, ms: &[Mutation]) -> Vec<u8> {
    for m in ms {
        let blocks = t.len() / 512;
        let header = |t: &mut Vec<u8>, block: usize, f: &dyn Fn(&mut tar::Header)| {
            if blocks > 0 {
                let at = block % blocks * 512;
                let mut h = tar::Header::from_byte_slice(&t[at..at + 512]).clone();
                f(&mut h);
                h.set_cksum();
                t[at..at + 512].copy_from_slice(h.as_bytes());
            }
        };
        match *m {
            Mutation::Flip { at, with } => {
                let i = at % t.len().max(1);
                if let Some(b) = t.get_mut(i) {
                    *b ^= with;
                }
            }
            Mutation::Size { block, size } => header(&mut t, block, &|h| h.set_size(size)),
            Mutation::Kind { block, kind } => {
                header(&mut t, block, &|h| h.set_entry_type(tar::EntryType::new(kind)));
            }
            Mutation::Cut { at } => t.truncate(at % (t.len() + 1)),
        }
    }
    t
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 300,
        max_shrink_iters: 100,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// Mutations of a valid layer, plain or gzip'd, followed by zeros without end under a 1 MiB byte cap:
    /// whatever a mutated size field claims, the run returns within 10 s holding under the bound.
    #[test]
    fn mutated_layers_return_in_bounded_time_and_memory(
        ms in prop::collection::vec(mutation(), 1..6),
        gz in any::<bool>(),
    ) {
        let t = mutate(valid_layer(), &ms);
        let limits = Limits { max_bytes: 1 << 20, ..Limits::default() };
        let input = if gz { endless_gz(t) } else { endless(t) };
        let (_, peak) = run(input, limits, 10 * SECOND);
        prop_assert!(peak < MEMORY_BOUND, "held {} bytes", peak);
    }
}
