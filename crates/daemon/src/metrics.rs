//! criusd's Prometheus endpoint (`metrics_address`, off by default): `GET /metrics` in the Prometheus text
//! format (0.0.4), served over plain http by hyper.
//!
//! ```text
//!  crius_grpc_requests_total{service,method,code}         counted by a tower layer on the gRPC server
//!  crius_grpc_request_duration_seconds{service,method,code} time to the response's headers
//!  crius_image_pulls_total{outcome}, crius_image_pull_bytes_total, crius_image_pull_duration_seconds
//!                                                         counted by the image service (crius_cri::metrics)
//!  crius_pods{state}, crius_containers{state}, crius_shims{state}
//!                                                         taken from the records at scrape time
//!  process_*                                              /proc/self at scrape time (metrics/process.rs)
//! ```
//!
//! A call's code is the response's `grpc-status` header, which tonic sends there for every error; a call
//! without one is OK (a unary call's OK status comes in the trailers, after the layer is done). Only the
//! methods criusd serves ([`crius_api::GRPC_METHODS`]) are labels of their own: any other path a client makes
//! up is counted under `service="unknown",method="unknown"`, so that no client can grow the series without
//! bound (3,000 made-up names made 60,000 series before).

mod http_server;
mod process;

pub use http_server::serve;

use std::sync::Arc;
use std::time::{Duration, Instant};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};
use tonic::codegen::http::{self, Response};

use crate::around::{Answer, Around, AroundLayer};

/// A call's labels: service, method, code.
type CallLabels = [(&'static str, String); 3];

/// The service and method labels of a path that names no method criusd serves.
const UNKNOWN: &str = "unknown";

/// gRPC's names of its codes, as Prometheus exporters spell them (`OK`, `NotFound`, ...).
const CODES: [&str; 17] = [
    "OK",
    "Canceled",
    "Unknown",
    "InvalidArgument",
    "DeadlineExceeded",
    "NotFound",
    "AlreadyExists",
    "PermissionDenied",
    "ResourceExhausted",
    "FailedPrecondition",
    "Aborted",
    "OutOfRange",
    "Unimplemented",
    "Internal",
    "Unavailable",
    "DataLoss",
    "Unauthenticated",
];

fn new_call_histogram() -> Histogram {
    // 0.5 ms to 16 s: a status read to a pod start under load.
    Histogram::new(exponential_buckets(0.0005, 2.0, 16))
}

/// The gRPC call figures; cheap to clone.
#[derive(Debug, Clone)]
pub struct Calls {
    count: Family<CallLabels, Counter>,
    seconds: Family<CallLabels, Histogram, fn() -> Histogram>,
}

impl Default for Calls {
    fn default() -> Calls {
        Calls {
            count: Family::default(),
            seconds: Family::new_with_constructor(new_call_histogram),
        }
    }
}

impl Calls {
    /// Counts a call of `path` (`/runtime.v1.RuntimeService/RunPodSandbox`) that ended with `code` after
    /// `took`.
    pub fn observe(&self, path: &str, code: Option<&str>, took: Duration) {
        let (service, method) = if crius_api::GRPC_METHODS.binary_search(&path).is_ok() {
            path.trim_start_matches('/').split_once('/').unwrap_or((path, ""))
        } else {
            (UNKNOWN, UNKNOWN)
        };
        let code = match code.map(|c| c.trim().parse::<usize>()) {
            None => "OK".to_string(),
            Some(Ok(n)) if n < CODES.len() => CODES[n].to_string(),
            Some(_) => "Unknown".to_string(),
        };
        let labels = [
            ("service", service.to_string()),
            ("method", method.to_string()),
            ("code", code),
        ];
        self.count.get_or_create(&labels).inc();
        self.seconds.get_or_create(&labels).observe(took.as_secs_f64());
    }

    /// The tower layer that counts every call of the server it wraps.
    pub fn layer(&self) -> AroundLayer<Calls> {
        AroundLayer(self.clone())
    }
}

/// Counts each call into [`Calls`]: its method, its code and how long it took to its response's headers.
impl Around for Calls {
    type Seen = (String, Instant);

    fn see<B>(&self, req: &http::Request<B>) -> (String, Instant) {
        (crate::around::method(req), Instant::now())
    }

    fn wrap<F, R, E>(&self, (path, started): (String, Instant), answer: F) -> Answer<R, E>
    where
        F: Future<Output = Result<Response<R>, E>> + Send + 'static,
        R: Default + Send + 'static,
        E: Send + 'static,
    {
        let calls = self.clone();
        Box::pin(async move {
            let r = answer.await;
            let code = match &r {
                Ok(resp) => resp
                    .headers()
                    .get("grpc-status")
                    .map(|v| v.to_str().unwrap_or("2").to_string()),
                Err(_) => Some("2".to_string()),
            };
            calls.observe(&path, code.as_deref(), started.elapsed());
            r
        })
    }
}

/// Counts by state.
type ByState<'a> = &'a [(&'static str, u64)];

/// The pods, containers and shims by state, taken when scraped.
struct Census(Arc<crius_cri::node::Node>);

impl std::fmt::Debug for Census {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Census")
    }
}

impl Collector for Census {
    fn encode(&self, mut e: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let c = self.0.census();
        let families: [(&str, &str, ByState<'_>); 3] = [
            ("pods", "Pod sandboxes by state (ready, notready).", &c.pods),
            (
                "containers",
                "Containers by state (created, running, exited, unknown).",
                &c.containers,
            ),
            (
                "shims",
                "Shims criusd is connected to, and pods whose shim is lost (containers in an unknown state).",
                &c.shims,
            ),
        ];
        for (name, help, counts) in families {
            let mut m = e.encode_descriptor(name, help, None, MetricType::Gauge)?;
            for (state, n) in counts {
                m.encode_family(&[("state", *state)])?.encode_gauge(n)?;
            }
        }
        Ok(())
    }
}

/// `/proc/self` when scraped.
#[derive(Debug)]
struct ProcessFigures;

impl Collector for ProcessFigures {
    fn encode(&self, mut e: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        match process::read() {
            Some(f) => process::encode(&f, &mut e),
            None => Ok(()),
        }
    }
}

/// Everything the endpoint shows.
#[derive(Debug, Default)]
pub struct Metrics {
    registry: Registry,
    /// The gRPC server's calls.
    pub calls: Calls,
    /// The image service's pulls.
    pub pulls: crius_cri::metrics::Pulls,
}

impl Metrics {
    /// The registry with the call and pull families and the process figures; [`Metrics::watch`] adds the
    /// runtime's census.
    pub fn new() -> Metrics {
        let mut m = Metrics::default();
        // The registry ends each help text with a full stop.
        let crius = m.registry.sub_registry_with_prefix("crius");
        crius.register(
            "grpc_requests",
            "gRPC calls served, by service, method and code",
            m.calls.count.clone(),
        );
        crius.register_with_unit(
            "grpc_request_duration",
            "Time from a gRPC call's arrival to its response's headers, by service, method and code",
            Unit::Seconds,
            m.calls.seconds.clone(),
        );
        m.pulls.register(crius);
        m.registry.register_collector(Box::new(ProcessFigures));
        m
    }

    /// Adds the census of `runtime`'s pods, containers and shims.
    pub fn watch(&mut self, runtime: Arc<crius_cri::node::Node>) {
        self.registry
            .sub_registry_with_prefix("crius")
            .register_collector(Box::new(Census(runtime)));
    }

    /// The text a scrape gets.
    pub fn render(&self) -> String {
        let mut text = String::new();
        if let Err(e) = prometheus_client::encoding::prometheus_text::encode(&mut text, &self.registry) {
            tracing::warn!("encoding the metrics: {e}");
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn has(text: &str, line: &str) {
        assert!(text.lines().any(|l| l == line), "{line:?} not in\n{text}");
    }

    #[test]
    fn calls_are_counted_by_service_method_and_code() {
        let m = Metrics::new();
        let path = "/runtime.v1.RuntimeService/RunPodSandbox";
        m.calls.observe(path, None, Duration::from_millis(3));
        m.calls.observe(path, Some("5"), Duration::from_millis(1));
        m.calls.observe(path, Some("99"), Duration::from_millis(1));
        let text = m.render();
        has(&text, "# TYPE crius_grpc_requests_total counter");
        let labels = "service=\"runtime.v1.RuntimeService\",method=\"RunPodSandbox\"";
        has(
            &text,
            &format!("crius_grpc_requests_total{{{labels},code=\"OK\"}} 1"),
        );
        has(
            &text,
            &format!("crius_grpc_requests_total{{{labels},code=\"NotFound\"}} 1"),
        );
        has(
            &text,
            &format!("crius_grpc_requests_total{{{labels},code=\"Unknown\"}} 1"),
        );
        has(&text, "# TYPE crius_grpc_request_duration_seconds histogram");
        has(
            &text,
            &format!("crius_grpc_request_duration_seconds_bucket{{{labels},code=\"OK\",le=\"0.004\"}} 1"),
        );
        has(
            &text,
            &format!("crius_grpc_request_duration_seconds_count{{{labels},code=\"OK\"}} 1"),
        );
        // The pulls' families and the process figures are there before any pull.
        has(&text, "# TYPE crius_image_pull_duration_seconds histogram");
        has(&text, "# TYPE process_cpu_seconds_total counter");
        assert!(
            text.lines()
                .any(|l| l.starts_with("process_resident_memory_bytes ")),
            "{text}"
        );
        assert!(text.lines().any(|l| l.starts_with("process_open_fds ")), "{text}");
        has(&text, "crius_image_pulls_total{outcome=\"failure\"} 0");
        assert!(
            !text.contains(".."),
            "a help text ends with two full stops:\n{text}"
        );
    }

    #[test]
    fn the_layer_reads_the_code_from_the_headers() {
        use tower::{Layer, Service, ServiceExt};
        let calls = Calls::default();
        let inner = tower::service_fn(|req: http::Request<()>| async move {
            let mut r = Response::new(());
            if req.uri().path().ends_with("ContainerStatus") {
                r.headers_mut()
                    .insert("grpc-status", http::HeaderValue::from_static("5"));
            }
            Ok::<_, std::convert::Infallible>(r)
        });
        let mut svc = calls.layer().layer(inner);
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        rt.block_on(async {
            for p in [
                "/runtime.v1.RuntimeService/Version",
                "/runtime.v1.RuntimeService/ContainerStatus",
                "/runtime.v1.RuntimeService/ContainerStatus",
            ] {
                let req = http::Request::builder().uri(p).body(()).unwrap();
                svc.ready().await.unwrap().call(req).await.unwrap();
            }
        });
        let labels = |m: &str, c: &str| {
            [
                ("service", "runtime.v1.RuntimeService".to_string()),
                ("method", m.to_string()),
                ("code", c.to_string()),
            ]
        };
        assert_eq!(calls.count.get_or_create(&labels("Version", "OK")).get(), 1);
        assert_eq!(
            calls
                .count
                .get_or_create(&labels("ContainerStatus", "NotFound"))
                .get(),
            2
        );
    }

    #[test]
    fn made_up_methods_share_one_label_set() {
        let m = Metrics::new();
        for i in 0..3000 {
            m.calls.observe(
                &format!("/runtime.v1.RuntimeService/Made{i}"),
                Some("12"),
                Duration::ZERO,
            );
            m.calls.observe(&format!("/x{i}.Y/Z"), None, Duration::ZERO);
        }
        m.calls.observe("no-slash", None, Duration::ZERO);
        let text = m.render();
        let series = text
            .lines()
            .filter(|l| l.starts_with("crius_grpc_requests_total{"))
            .count();
        assert_eq!(series, 2, "{text}");
        has(
            &text,
            "crius_grpc_requests_total{service=\"unknown\",method=\"unknown\",code=\"Unimplemented\"} 3000",
        );
        has(
            &text,
            "crius_grpc_requests_total{service=\"unknown\",method=\"unknown\",code=\"OK\"} 3001",
        );
    }
}
