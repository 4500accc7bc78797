//! A session's writer task: one FIFO queue of frames, encoded and written in batches.

use std::sync::Arc;

use bytes::BytesMut;
use tokio::io::{AsyncWrite, AsyncWriteExt, WriteHalf};
use tokio::sync::{OwnedSemaphorePermit, mpsc};

use super::frame::{Encoder, Frame};
use super::session::Shared;

/// What the writer is asked to do.
pub(crate) enum Out {
    /// Send a frame; the permit (room in the queue) is given back once it is written.
    Frame(Frame, Option<OwnedSemaphorePermit>),
    /// Flush, shut the io's write side down and stop.
    Shutdown,
}

/// Writes queued frames until told to stop or the io fails; then shuts the write side down.
pub(crate) async fn writer<T: AsyncWrite>(
    shared: Arc<Shared>,
    mut io: WriteHalf<T>,
    mut encoder: Encoder,
    mut rx: mpsc::UnboundedReceiver<Out>,
) {
    const BATCH: usize = 64 * 1024;
    let mut buf = BytesMut::with_capacity(BATCH);
    let mut stop = false;
    while !stop {
        let Some(first) = rx.recv().await else { break };
        let mut next = Some(first);
        while let Some(out) = next.take() {
            match out {
                Out::Frame(frame, permit) => {
                    if let Err(why) = encoder.encode(&frame, &mut buf) {
                        tracing::debug!(%why, "spdy: dropping a frame that cannot be encoded");
                    }
                    drop(permit);
                }
                Out::Shutdown => stop = true,
            }
            if !stop && buf.len() < BATCH {
                next = rx.try_recv().ok();
            }
        }
        if let Err(why) = async {
            io.write_all(&buf).await?;
            io.flush().await
        }
        .await
        {
            tracing::debug!(%why, "spdy: write failed");
            shared.end();
            break;
        }
        buf.clear();
    }
    shared.room.close();
    let _ = io.shutdown().await;
}
