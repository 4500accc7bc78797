//! Downloading one blob of a pull: once per store however many pulls want it at once (a lock per blob),
//! straight to disk through the ingest writer (hashed on the way, stored only if the digest matches), never
//! read past its descriptor's size and one byte, and cancelled when no byte arrives for the pull's progress
//! timeout ([`Error::DeadlineExceeded`] naming the blob and its repository; the partial file goes with the
//! dropped writer).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use oci_client::{Client, Reference};

use crate::pull::Progress;
use crate::{Digest, Error, Result, Store};

/// What one blob download needs from its pull.
pub(crate) struct Source<'a> {
    /// The registry client, its credentials already negotiated.
    pub client: &'a Client,
    /// The image (its repository is where the blob is fetched from).
    pub image: &'a Reference,
    /// The image as the user named it, for messages.
    pub whole: &'a str,
    /// The store written into.
    pub store: &'a Store,
    /// How long a download may go without a byte before it is cancelled (None: never).
    pub stall: Option<Duration>,
    /// Told what happens.
    pub progress: &'a (dyn Fn(Progress) + Send + Sync),
}

/// Downloads blob `d` of `size` bytes into the store; gives `d` back with None when it was there already
/// (another pull stored it meanwhile), else with its size.
pub(crate) async fn blob<'d>(
    src: &Source<'_>,
    d: &'d Digest,
    size: u64,
) -> Result<(&'d Digest, Option<u64>)> {
    fetch(src, d, size).await.map(|got| (d, got))
}

async fn fetch(src: &Source<'_>, d: &Digest, size: u64) -> Result<Option<u64>> {
    // One download per blob, however many pulls want it at once.
    let lock = inflight(src.store, d);
    let _guard = lock.lock().await;
    if src.store.has_blob(d) {
        return Ok(None);
    }
    let whole = src.whole;
    let received = AtomicU64::new(0);
    let mut w = Counting {
        inner: src.store.blob_writer(d)?,
        digest: d,
        done: 0,
        reported: 0,
        limit: size,
        progress: src.progress,
        received: &received,
    };
    let pulled = {
        let pull = src.client.pull_blob(src.image, d.as_str(), &mut w);
        match src.stall {
            None => pull.await,
            Some(limit) => {
                tokio::select! {
                    r = pull => r,
                    stalled = watch(&received, limit) => {
                        // The request is dropped here, its connection closed; the writer removes its file.
                        return Err(Error::DeadlineExceeded(format!(
                            "blob {d} of {whole} (repository {}): no progress for {}s, after {stalled} of {size} \
                             bytes ([image] pull_progress_timeout)",
                            src.image.repository(),
                            limit.as_secs_f32()
                        )));
                    }
                }
            }
        }
    };
    if w.done > size {
        // Cut off at its size and one byte: the rest was never read, nothing is stored.
        return Err(crate::bounded::size_mismatch(
            format!("blob {d} of {whole}"),
            size,
            "more",
        ));
    }
    pulled.map_err(|e| Error::from_registry(&format!("blob {d} of {whole}"), e))?;
    (src.progress)(Progress::Downloading {
        digest: d.clone(),
        done: w.done,
    });
    let size = w.inner.commit(src.store, d, &format!("blob of {whole}"))?;
    (src.progress)(Progress::Stored {
        digest: d.clone(),
        size,
    });
    Ok(Some(size))
}

/// Returns (with the bytes received) once `received` has not moved for `limit`.
async fn watch(received: &AtomicU64, limit: Duration) -> u64 {
    let tick = (limit / 8).clamp(Duration::from_millis(20), Duration::from_secs(1));
    let (mut seen, mut since) = (received.load(Ordering::Relaxed), Instant::now());
    loop {
        tokio::time::sleep(tick).await;
        let now = received.load(Ordering::Relaxed);
        if now != seen {
            (seen, since) = (now, Instant::now());
        } else if since.elapsed() >= limit {
            return seen;
        }
    }
}

/// A blob writer that reports bytes received.
struct Counting<'a> {
    inner: crate::ingest::BlobWriter,
    digest: &'a Digest,
    done: u64,
    reported: u64,
    /// The descriptor's size: a write past it fails (and `done` goes past it, by at most one byte).
    limit: u64,
    progress: &'a (dyn Fn(Progress) + Send + Sync),
    /// `done`, for the stall watch.
    received: &'a AtomicU64,
}

impl tokio::io::AsyncWrite for Counting<'_> {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        if this.done + buf.len() as u64 > this.limit {
            // Its one byte more is counted, not written.
            this.done = this.limit + 1;
            return std::task::Poll::Ready(Err(std::io::Error::other(format!(
                "blob {} is larger than its descriptor's {} bytes",
                this.digest, this.limit
            ))));
        }
        let r = std::pin::Pin::new(&mut this.inner).poll_write(cx, buf);
        if let std::task::Poll::Ready(Ok(n)) = r {
            this.done += n as u64;
            this.received.store(this.done, Ordering::Relaxed);
            if this.done - this.reported >= 256 * 1024 {
                this.reported = this.done;
                (this.progress)(Progress::Downloading {
                    digest: this.digest.clone(),
                    done: this.done,
                });
            }
        }
        r
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// The lock that serialises downloads of blob `d` into `store`.
fn inflight(store: &Store, d: &Digest) -> std::sync::Arc<tokio::sync::Mutex<()>> {
    static MAP: std::sync::Mutex<Option<HashMap<String, std::sync::Arc<tokio::sync::Mutex<()>>>>> =
        std::sync::Mutex::new(None);
    let mut map = MAP.lock().unwrap_or_else(|p| p.into_inner());
    let key = format!("{}\0{d}", store.root().display());
    map.get_or_insert_with(HashMap::new)
        .entry(key)
        .or_default()
        .clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_watch_fires_only_after_a_quiet_spell() {
        let received = AtomicU64::new(0);
        let limit = Duration::from_secs(4);
        let started = Instant::now();
        let feed = async {
            for n in 1..=10u64 {
                tokio::time::sleep(Duration::from_secs(1)).await;
                received.store(n, Ordering::Relaxed);
            }
            std::future::pending::<()>().await;
        };
        let got = tokio::select! {
            n = watch(&received, limit) => n,
            _ = feed => unreachable!(),
        };
        assert_eq!(got, 10, "it waited while bytes came");
        assert!(
            started.elapsed() >= Duration::from_secs(14),
            "{:?}",
            started.elapsed()
        );
    }
}
