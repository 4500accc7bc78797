//! Reading what an image's descriptors describe without trusting them further than their size: a blob is
//! read to at most its descriptor's size + 1 bytes (one byte more tells it is larger, and is never stored),
//! manifests and indexes, which are held in memory, to at most [`MAX_MANIFEST`] (containerd's cap), and a
//! file of an archive only if it is a regular one (a FIFO or a device in an archive does not hang criusd).

use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use crate::error::io;
use crate::{Digest, Error, Result, Store};

/// The largest manifest, index, `index.json` or `manifest.json` read: 4 MiB, as containerd.
pub const MAX_MANIFEST: u64 = 4 << 20;

/// The largest image config of a docker-archive read (it has no descriptor to give its size).
pub const MAX_CONFIG: u64 = 16 << 20;

/// The size a descriptor gives: required, as the OCI image spec says.
pub fn descriptor_size(v: &serde_json::Value, what: &str) -> Result<u64> {
    v["size"]
        .as_u64()
        .ok_or_else(|| Error::InvalidArgument(format!("{what}: descriptor without a size")))
}

/// `p`, opened for reading if it is a regular file (without waiting on a FIFO); its size.
pub fn open_regular(p: &Path, what: &str) -> Result<(File, u64)> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(p)
        .map_err(|e| io(format!("opening {what}"), e))?;
    let meta = f.metadata().map_err(|e| io(format!("reading {what}"), e))?;
    if !meta.is_file() {
        return Err(Error::InvalidArgument(format!("{what} is not a regular file")));
    }
    Ok((f, meta.len()))
}

/// The regular file `p`, at most `max` bytes: a larger one is InvalidArgument naming `what`.
pub fn read_capped(p: &Path, max: u64, what: &str) -> Result<Vec<u8>> {
    let (f, len) = open_regular(p, what)?;
    if len > max {
        return Err(Error::InvalidArgument(format!(
            "{what} is {len} bytes, more than the {max} read"
        )));
    }
    let mut bytes = Vec::new();
    f.take(max + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| io(format!("reading {what}"), e))?;
    if bytes.len() as u64 > max {
        return Err(Error::InvalidArgument(format!(
            "{what} is more than the {max} bytes read"
        )));
    }
    Ok(bytes)
}

/// The error for blob `what`, described as `expected` bytes, found to have `actual` (e.g. "more").
pub fn size_mismatch(what: impl Into<String>, expected: u64, actual: impl Into<String>) -> Error {
    Error::SizeMismatch {
        what: what.into(),
        expected,
        actual: actual.into(),
    }
}

/// Stores the regular file `p` as blob `d` of `size` bytes, streamed (not held in memory): at most `size` + 1
/// bytes are read; a file of another size, or another digest, stores nothing.
pub fn store_file(store: &Store, p: &Path, d: &Digest, size: u64, what: &str) -> Result<()> {
    if store.has_blob(d) {
        return Ok(());
    }
    let (f, len) = open_regular(p, what)?;
    if len != size {
        return Err(size_mismatch(what, size, len.to_string()));
    }
    let mut w = store.blob_writer(d)?;
    let copied =
        std::io::copy(&mut f.take(size + 1), &mut w).map_err(|e| io(format!("storing {what}"), e))?;
    if copied != size {
        return Err(size_mismatch(what, size, copied.to_string()));
    }
    w.flush().map_err(|e| io(format!("storing {what}"), e))?;
    w.commit(store, d, what).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_blob_of_another_size_than_its_descriptor_is_refused_and_not_stored() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("store")).unwrap();
        let blob = dir.path().join("blob");
        std::fs::write(&blob, b"0123456789").unwrap();
        let d = Digest::of(b"0123456789");
        let e = store_file(&store, &blob, &d, 4, "layer x").unwrap_err();
        assert!(
            matches!(&e, Error::SizeMismatch { expected: 4, .. }) && e.to_string().contains("layer x"),
            "{e}"
        );
        assert!(!store.has_blob(&d));
        store_file(&store, &blob, &d, 10, "layer x").unwrap();
        assert_eq!(store.read_blob(&d).unwrap(), b"0123456789");
    }

    #[test]
    fn fifos_devices_and_oversized_files_are_refused_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
        let e = read_capped(&fifo, MAX_MANIFEST, "index.json").unwrap_err();
        assert!(e.to_string().contains("index.json is not a regular file"), "{e}");
        let e = read_capped(Path::new("/dev/zero"), MAX_MANIFEST, "manifest x").unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
        let big = dir.path().join("big");
        File::create(&big).unwrap().set_len(MAX_MANIFEST + 1).unwrap();
        let e = read_capped(&big, MAX_MANIFEST, "manifest y").unwrap_err();
        assert!(e.to_string().contains("manifest y is 4194305 bytes"), "{e}");
    }
}
