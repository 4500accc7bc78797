//! Writing a blob without holding it in memory: bytes go to a file under `<root>/ingest/` and into a sha256
//! hasher as they arrive; `commit` moves the file into `blobs/` only if the digest matches. Dropped without a
//! commit (an error, a cancelled pull), the partial file is removed.

use std::io::Write;
use std::path::PathBuf;
use std::pin::Pin;
use std::task::{Context, Poll};

use sha2::{Digest as _, Sha256};

use crate::error::io;
use crate::{Digest, Error, Result, Store};

/// A blob being written.
pub struct BlobWriter {
    path: PathBuf,
    file: Option<std::fs::File>,
    hasher: Sha256,
    size: u64,
}

impl Store {
    /// Starts writing a blob expected to be `expected`.
    pub fn blob_writer(&self, expected: &Digest) -> Result<BlobWriter> {
        let path = self
            .root()
            .join("ingest")
            .join(crate::store::temp_name(expected.hex()));
        let file = std::fs::File::create(&path).map_err(|e| io(format!("creating {}", path.display()), e))?;
        Ok(BlobWriter {
            path,
            file: Some(file),
            hasher: Sha256::new(),
            size: 0,
        })
    }
}

impl BlobWriter {
    /// Checks the digest, syncs, and moves the blob into place; returns its size. A mismatch stores nothing.
    pub fn commit(mut self, store: &Store, expected: &Digest, what: &str) -> Result<u64> {
        let actual = Digest::from_hasher(std::mem::take(&mut self.hasher));
        if &actual != expected {
            return Err(Error::DigestMismatch {
                what: what.to_string(),
                expected: expected.to_string(),
                actual: actual.to_string(),
            });
        }
        let file = self.file.take().expect("not yet committed");
        file.sync_all()
            .map_err(|e| io(format!("syncing blob {expected}"), e))?;
        std::fs::rename(&self.path, store.blob_path(expected))
            .map_err(|e| io(format!("storing blob {expected}"), e))?;
        Ok(self.size)
    }
}

impl Write for BlobWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let f = self
            .file
            .as_mut()
            .ok_or_else(|| std::io::Error::other("blob already committed"))?;
        let n = f.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.size += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Local-disk writes are short, so the async side writes synchronously.
impl tokio::io::AsyncWrite for BlobWriter {
    fn poll_write(self: Pin<&mut Self>, _: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Poll::Ready(self.get_mut().write(buf))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

impl Drop for BlobWriter {
    fn drop(&mut self) {
        if self.file.is_some() {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count(dir: &std::path::Path) -> usize {
        std::fs::read_dir(dir).unwrap().count()
    }

    #[test]
    fn commit_checks_the_digest_and_leaves_nothing_on_failure() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let good = Digest::of(b"hello");
        let mut w = store.blob_writer(&good).unwrap();
        w.write_all(b"hel").unwrap();
        w.write_all(b"lo").unwrap();
        assert_eq!(w.commit(&store, &good, "test").unwrap(), 5);
        assert_eq!(store.read_blob(&good).unwrap(), b"hello");

        let other = Digest::of(b"other");
        let mut w = store.blob_writer(&other).unwrap();
        w.write_all(b"not other").unwrap();
        let e = w.commit(&store, &other, "test blob").unwrap_err().to_string();
        assert!(e.contains("test blob") && e.contains(other.as_str()), "{e}");
        assert!(!store.has_blob(&other));
        assert_eq!(count(&dir.path().join("ingest")), 0, "no partial file left");

        let w = store.blob_writer(&other).unwrap();
        drop(w);
        assert_eq!(count(&dir.path().join("ingest")), 0, "a dropped writer cleans up");
        assert_eq!(count(&dir.path().join("blobs/sha256")), 1);
    }
}
