//! What every HTTP server of criusd's (streaming, metrics) shares against clients that hold connections:
//! a cap on the connections served at once, waited for before `accept`, so the ones past it wait in the
//! kernel's backlog and cost criusd no descriptor; and a deadline on the request's head (and a TLS
//! handshake), after which the connection is closed.

use std::sync::Arc;
use std::time::Duration;

use hyper::server::conn::http1;
use hyper_util::rt::TokioTimer;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The deadline on a request's head, and on a TLS handshake, unless configured.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// The most bytes hyper buffers of a request's head.
pub const MAX_HEAD: usize = 64 * 1024;

/// Connections served at once.
#[derive(Debug, Clone)]
pub struct Slots(Arc<Semaphore>);

impl Slots {
    /// Room for `max` connections at once (at least 1).
    pub fn new(max: usize) -> Slots {
        Slots(Arc::new(Semaphore::new(max.clamp(1, Semaphore::MAX_PERMITS))))
    }

    /// Waits for a free slot, then for the next connection; the slot is held until the permit is dropped.
    /// Failed accepts (out of descriptors, say) are retried after a pause.
    pub async fn accept(&self, listener: &TcpListener) -> (TcpStream, OwnedSemaphorePermit) {
        let Ok(permit) = self.0.clone().acquire_owned().await else {
            // The semaphore is never closed; wait forever rather than spin.
            return std::future::pending().await;
        };
        loop {
            match listener.accept().await {
                Ok((tcp, _)) => return (tcp, permit),
                Err(e) => {
                    tracing::debug!("accept: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }

    /// Slots free now.
    pub fn available(&self) -> usize {
        self.0.available_permits()
    }
}

/// An http/1 builder that closes a connection whose request head has not come whole within `header_timeout`,
/// and buffers at most [`MAX_HEAD`] bytes of it.
pub fn builder(header_timeout: Duration) -> http1::Builder {
    let mut b = http1::Builder::new();
    b.timer(TokioTimer::new())
        .header_read_timeout(header_timeout)
        .max_buf_size(MAX_HEAD);
    b
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn connections_past_the_cap_wait_and_a_silent_one_is_closed() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let slots = Slots::new(1);
        let s = slots.clone();
        tokio::spawn(async move {
            loop {
                let (tcp, permit) = s.accept(&listener).await;
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(|_req| async {
                        Ok::<_, std::convert::Infallible>(hyper::Response::new(String::new()))
                    });
                    let _ = builder(Duration::from_millis(300))
                        .serve_connection(hyper_util::rt::TokioIo::new(tcp), service)
                        .await;
                    drop(permit);
                });
            }
        });
        let mut first = TcpStream::connect(addr).await.unwrap();
        let t = std::time::Instant::now();
        // A second connection waits for the first's slot: its request is not answered meanwhile.
        let mut second = TcpStream::connect(addr).await.unwrap();
        second
            .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let mut buf = [0u8; 64];
        let early = tokio::time::timeout(Duration::from_millis(150), second.read(&mut buf)).await;
        assert!(early.is_err(), "answered past the cap: {early:?}");
        // The first, silent, is closed at the deadline.
        assert_eq!(first.read(&mut buf).await.unwrap_or(0), 0);
        assert!(t.elapsed() >= Duration::from_millis(250), "{:?}", t.elapsed());
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
        // Then the second is served.
        let n = tokio::time::timeout(Duration::from_secs(5), second.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert!(
            buf[..n].starts_with(b"HTTP/1.1 200"),
            "{:?}",
            String::from_utf8_lossy(&buf[..n])
        );
        drop(slots);
    }
}
