//! The endpoint itself: a hyper http/1 server on its own listener, `GET /metrics` and nothing else. At most
//! [`MAX_CONNECTIONS`] connections at once (more wait in the listen backlog), each closed when a request's
//! head takes over [`crius_stream::http::HEADER_TIMEOUT`] (an idle keep-alive one too).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Method, Response, StatusCode, header};
use hyper_util::rt::TokioIo;

use super::Metrics;

type Reply = Response<Full<Bytes>>;

/// Connections served at once: Prometheus keeps one per scrape target.
pub const MAX_CONNECTIONS: usize = 64;

fn reply(code: StatusCode, content_type: &'static str, body: String) -> Reply {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = code;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(content_type),
    );
    r
}

async fn answer(metrics: Arc<Metrics>, req: hyper::Request<hyper::body::Incoming>) -> Reply {
    let plain = "text/plain; charset=utf-8";
    if req.uri().path() != "/metrics" {
        return reply(StatusCode::NOT_FOUND, plain, "not found: try /metrics\n".into());
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return reply(StatusCode::METHOD_NOT_ALLOWED, plain, "use GET\n".into());
    }
    // The census reads the records under their locks: off the async workers.
    match tokio::task::spawn_blocking(move || metrics.render()).await {
        Ok(text) => reply(
            StatusCode::OK,
            prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
            text,
        ),
        Err(e) => reply(StatusCode::INTERNAL_SERVER_ERROR, plain, format!("{e}\n")),
    }
}

/// Listens on `address` (a bind failure is criusd's failure to start) and serves `metrics` from a task of
/// its own; returns the address bound (a port 0 resolved).
pub async fn serve(address: SocketAddr, metrics: Arc<Metrics>) -> Result<SocketAddr, String> {
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .map_err(|e| format!("metrics_address {address}: {e}"))?;
    let bound = listener
        .local_addr()
        .map_err(|e| format!("metrics_address {address}: {e}"))?;
    let slots = crius_stream::http::Slots::new(MAX_CONNECTIONS);
    tokio::spawn(async move {
        loop {
            let (tcp, slot) = slots.accept(&listener).await;
            let metrics = metrics.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req| {
                    let metrics = metrics.clone();
                    async move { Ok::<_, Infallible>(answer(metrics, req).await) }
                });
                let _ = crius_stream::http::builder(crius_stream::http::HEADER_TIMEOUT)
                    .serve_connection(TokioIo::new(tcp), service)
                    .await;
                drop(slot);
            });
        }
    });
    Ok(bound)
}
