//! An idle timeout on a connection: [`IdleIo`] fails its reads once nothing was read or written for the
//! timeout, so the session on top sees its peer gone and cleans up as for a disconnect.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// `io` with an idle timeout.
pub struct IdleIo<T> {
    io: T,
    timeout: Duration,
    start: Instant,
    /// ms since `start` of the last read or write.
    last: Arc<AtomicU64>,
    sleep: Pin<Box<Sleep>>,
}

impl<T> IdleIo<T> {
    /// Wraps `io`; `timeout` of nothing read or written ends it.
    pub fn new(io: T, timeout: Duration) -> IdleIo<T> {
        let start = Instant::now();
        IdleIo {
            io,
            timeout,
            start,
            last: Arc::new(AtomicU64::new(0)),
            sleep: Box::pin(tokio::time::sleep(timeout)),
        }
    }

    fn touch(&self) {
        let ms = self.start.elapsed().as_millis() as u64;
        self.last.store(ms, Ordering::Relaxed);
    }

    /// Whether the timeout passed with no activity; re-arms the timer otherwise.
    fn expired(&mut self, cx: &mut Context<'_>) -> bool {
        loop {
            if self.sleep.as_mut().poll(cx).is_pending() {
                return false;
            }
            let last = self.start + Duration::from_millis(self.last.load(Ordering::Relaxed));
            let deadline = last + self.timeout;
            if deadline <= Instant::now() {
                return true;
            }
            self.sleep.as_mut().reset(deadline);
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for IdleIo<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        match Pin::new(&mut self.io).poll_read(cx, buf) {
            Poll::Ready(r) => {
                if buf.filled().len() > before {
                    self.touch();
                }
                Poll::Ready(r)
            }
            Poll::Pending if self.expired(cx) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("the stream was idle for {:?}", self.timeout),
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for IdleIo<T> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.io).poll_write(cx, data);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.touch();
        }
        r
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test(start_paused = true)]
    async fn reads_fail_after_the_idle_timeout_and_activity_defers_it() {
        let (a, mut b) = tokio::io::duplex(64);
        let mut io = IdleIo::new(a, Duration::from_secs(10));
        let mut buf = [0u8; 4];
        tokio::time::advance(Duration::from_secs(6)).await;
        b.write_all(b"x").await.unwrap();
        assert_eq!(io.read(&mut buf).await.unwrap(), 1);
        tokio::time::advance(Duration::from_secs(6)).await;
        io.write_all(b"y").await.unwrap();
        let t = Instant::now();
        let e = io.read(&mut buf).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert!(t.elapsed() >= Duration::from_secs(9), "{:?}", t.elapsed());
    }
}
