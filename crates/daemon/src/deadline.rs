//! A call's gRPC deadline answered as DeadlineExceeded naming the call. The gRPC spec, containerd and critest
//! ("public image should timeout if requested") expect DEADLINE_EXCEEDED when a call's `grpc-timeout` passes.
//!
//! One clock decides: this layer's. tonic's server arms a timer of its own from the same header for every call
//! (its transport server always does; it cannot be turned off) and, when that fires first, answers Cancelled.
//! It never does here: [`Deadline`] takes the call's deadline when the call arrives, before the server around
//! it arms its timer (tonic calls the service first, then starts its sleep), so ours is never later; and
//! when tonic's timer wakes the call, tonic polls the call before its own timer, and the call sees the clock
//! past its deadline and answers DeadlineExceeded itself (it reads the clock on every poll, so the order in
//! which the timer wheel fires the two timers does not matter). tonic's timer is left as the backstop it
//! cannot stop being; no margin, no race.

use std::task::Poll;
use std::time::Duration;

use tokio::time::Instant;
use tonic::codegen::http::{self, Response};

use crate::around::{Answer, Around, AroundLayer};

/// The `grpc-timeout` header's value (1 to 8 digits and a unit: H, M, S, m, u, n), if well formed.
pub fn parse(value: &str) -> Option<Duration> {
    let (digits, unit) = value.split_at(value.len().checked_sub(1)?);
    if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n * 3600),
        "M" => Duration::from_secs(n * 60),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

/// The layer criusd's server wraps its services in.
pub const LAYER: AroundLayer<Deadline> = AroundLayer(Deadline);

/// Ends a call whose `grpc-timeout` passes with DeadlineExceeded naming the call.
#[derive(Debug, Clone, Copy, Default)]
pub struct Deadline;

/// A call with a deadline: its method, its `grpc-timeout` and when that passes.
pub struct Limit {
    method: String,
    timeout: Duration,
    at: Instant,
}

impl Around for Deadline {
    type Seen = Option<Limit>;

    fn see<B>(&self, req: &http::Request<B>) -> Option<Limit> {
        let timeout = parse(req.headers().get("grpc-timeout")?.to_str().ok()?)?;
        Some(Limit {
            method: crate::around::method(req),
            timeout,
            at: Instant::now() + timeout,
        })
    }

    fn wrap<F, R, E>(&self, limit: Option<Limit>, answer: F) -> Answer<R, E>
    where
        F: Future<Output = Result<Response<R>, E>> + Send + 'static,
        R: Default + Send + 'static,
        E: Send + 'static,
    {
        let Some(Limit { method, timeout, at }) = limit else {
            return Box::pin(answer);
        };
        let mut answer = Box::pin(answer);
        let mut timer = Box::pin(tokio::time::sleep_until(at));
        Box::pin(std::future::poll_fn(move |cx| {
            if let Poll::Ready(done) = answer.as_mut().poll(cx) {
                return Poll::Ready(done);
            }
            if Instant::now() >= at || timer.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Ok(tonic::Status::deadline_exceeded(format!(
                    "{method}: the call's deadline (grpc-timeout {timeout:?}) passed"
                ))
                .into_http()));
            }
            Poll::Pending
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower::{Layer as _, Service as _};

    #[test]
    fn parses_each_unit_and_refuses_the_malformed() {
        assert_eq!(parse("1m"), Some(Duration::from_millis(1)));
        assert_eq!(parse("2S"), Some(Duration::from_secs(2)));
        assert_eq!(parse("3M"), Some(Duration::from_secs(180)));
        assert_eq!(parse("1H"), Some(Duration::from_secs(3600)));
        assert_eq!(parse("500u"), Some(Duration::from_micros(500)));
        assert_eq!(parse("7n"), Some(Duration::from_nanos(7)));
        for bad in ["", "m", "123456789S", "1x", "-1S", "1.5S"] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
    }

    /// A handler slower than the deadline is answered DeadlineExceeded (grpc-status 4), not left to tonic's
    /// Cancelled; one without a deadline is left alone.
    #[tokio::test]
    async fn a_late_call_is_deadline_exceeded() {
        let slow = tower::service_fn(|_: http::Request<()>| async {
            tokio::time::sleep(Duration::from_secs(5)).await;
            Ok::<_, std::convert::Infallible>(Response::new(String::from("late")))
        });
        let mut svc = LAYER.layer(slow);
        let req = http::Request::builder()
            .uri("/runtime.v1.ImageService/PullImage")
            .header("grpc-timeout", "50m")
            .body(())
            .unwrap();
        let started = std::time::Instant::now();
        let answer = svc.call(req).await.unwrap();
        assert!(started.elapsed() < Duration::from_secs(2));
        assert_eq!(answer.headers()["grpc-status"], "4");

        let fast = tower::service_fn(|_: http::Request<()>| async {
            Ok::<_, std::convert::Infallible>(Response::new(String::from("ok")))
        });
        let answer = LAYER.layer(fast).call(http::Request::new(())).await.unwrap();
        assert_eq!(answer.body(), "ok");
    }

    /// A handler that answers after 10 s, served as `runtime.v1.RuntimeService`.
    #[derive(Clone)]
    struct Slow;

    impl tonic::server::NamedService for Slow {
        const NAME: &'static str = "runtime.v1.RuntimeService";
    }

    impl tower::Service<http::Request<tonic::body::Body>> for Slow {
        type Response = Response<tonic::body::Body>;
        type Error = std::convert::Infallible;
        type Future = Answer<tonic::body::Body, Self::Error>;

        fn poll_ready(&mut self, _: &mut std::task::Context<'_>) -> Poll<Result<(), Self::Error>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, _: http::Request<tonic::body::Body>) -> Self::Future {
            Box::pin(async {
                tokio::time::sleep(Duration::from_secs(10)).await;
                Ok(Response::new(tonic::body::Body::default()))
            })
        }
    }

    /// Through tonic's own server (whose timer reads the same header), a call past its deadline is answered
    /// DeadlineExceeded naming the call, every time: 50 calls of 1 to 25 ms deadlines, on one connection.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn through_tonic_a_late_call_is_always_deadline_exceeded() {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("s.sock");
        let listener = tokio::net::UnixListener::bind(&sock).unwrap();
        let server = tokio::spawn(
            tonic::transport::Server::builder()
                .layer(LAYER)
                .add_service(Slow)
                .serve_with_incoming(tokio_stream::wrappers::UnixListenerStream::new(listener)),
        );
        let io = hyper_util::rt::TokioIo::new(tokio::net::UnixStream::connect(&sock).await.unwrap());
        let (mut send, conn) =
            hyper::client::conn::http2::handshake(hyper_util::rt::TokioExecutor::new(), io)
                .await
                .unwrap();
        tokio::spawn(conn);
        for i in 0..50 {
            let timeout = format!("{}m", 1 + i % 25);
            let req = http::Request::post("http://crius.invalid/runtime.v1.RuntimeService/Version")
                .header("content-type", "application/grpc")
                .header("te", "trailers")
                .header("grpc-timeout", &timeout)
                .body(http_body_util::Full::new(bytes::Bytes::from_static(&[0; 5])))
                .unwrap();
            send.ready().await.unwrap();
            let answer = send.send_request(req).await.unwrap();
            let status = tonic::Status::from_header_map(answer.headers())
                .unwrap_or_else(|| panic!("call {i} ({timeout}): no status in {:?}", answer.headers()));
            assert_eq!(
                status.code(),
                tonic::Code::DeadlineExceeded,
                "call {i} ({timeout}): {status:?}"
            );
            assert!(
                status.message().contains("/runtime.v1.RuntimeService/Version"),
                "call {i}: {status:?}"
            );
        }
        server.abort();
    }
}
