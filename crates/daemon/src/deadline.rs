//! A call's gRPC deadline answered as DeadlineExceeded. tonic's server enforces the `grpc-timeout` a client
//! sends and, when it passes, answers Cancelled; the gRPC spec, containerd and critest ("public image should
//! timeout if requested") expect DEADLINE_EXCEEDED. [`DeadlineLayer`] sits inside tonic's own timeout and ends
//! the call [`MARGIN`] earlier, with DeadlineExceeded naming the method.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tonic::codegen::http::{self, Response};

/// How much earlier than tonic this layer ends a call: more than the timer's 1 ms granularity, so it is first.
pub const MARGIN: Duration = Duration::from_millis(2);

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

/// Wraps a server's services in [`Deadline`].
#[derive(Debug, Clone, Copy, Default)]
pub struct DeadlineLayer;

impl<S> tower::Layer<S> for DeadlineLayer {
    type Service = Deadline<S>;

    fn layer(&self, inner: S) -> Deadline<S> {
        Deadline { inner }
    }
}

/// A service whose calls end DeadlineExceeded [`MARGIN`] before their `grpc-timeout`.
#[derive(Debug, Clone)]
pub struct Deadline<S> {
    inner: S,
}

impl<S, B, R> tower::Service<http::Request<B>> for Deadline<S>
where
    S: tower::Service<http::Request<B>, Response = Response<R>>,
    S::Future: Send + 'static,
    R: Default + Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let limit = req
            .headers()
            .get("grpc-timeout")
            .and_then(|v| v.to_str().ok())
            .and_then(parse)
            .map(|d| d.saturating_sub(MARGIN));
        let method = req.uri().path().to_string();
        let call = self.inner.call(req);
        Box::pin(async move {
            let Some(limit) = limit else {
                return call.await;
            };
            match tokio::time::timeout(limit, call).await {
                Ok(answer) => answer,
                Err(_) => Ok(tonic::Status::deadline_exceeded(format!(
                    "{method}: the call's deadline ({limit:?} from its start, less {MARGIN:?}) passed"
                ))
                .into_http()),
            }
        })
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
        let mut svc = DeadlineLayer.layer(slow);
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
        let answer = DeadlineLayer
            .layer(fast)
            .call(http::Request::new(()))
            .await
            .unwrap();
        assert_eq!(answer.body(), "ok");
    }
}
