//! Lifecycle hooks (postStart, preStop) and startup probes, run as kubelet runs them: `exec` through the
//! runtime's ExecSync, `httpGet` and `tcpSocket` against the pod's IP from this machine, `sleep` here.

use std::time::{Duration, Instant};

use crius_api::cri;
use crius_api::cri::runtime_service_client::RuntimeServiceClient;
use k8s_openapi::api::core::v1::{
    Container, ExecAction, HTTPGetAction, LifecycleHandler, Probe, TCPSocketAction,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tonic::transport::Channel;

use crate::Error;

/// Where a probe stands.
#[derive(Debug, Default)]
pub struct ProbeState {
    next: Option<Instant>,
    failures: i32,
}

impl ProbeState {
    /// When the probe runs next: None before its first run, which is due as soon as it is looked at.
    pub fn next(&self) -> Option<Instant> {
        self.next
    }
}

/// A probe's outcome so far.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// It succeeded.
    Passed,
    /// Not yet decided.
    Pending,
    /// It failed `failureThreshold` times in a row.
    Failed,
}

/// Runs `probe` against container `id` (of spec `c`, in a pod at `host`) if it is due.
pub async fn probe(
    rt: &mut RuntimeServiceClient<Channel>,
    id: &str,
    c: &Container,
    host: &str,
    probe: &Probe,
    st: &mut ProbeState,
) -> Verdict {
    let now = Instant::now();
    let next = *st
        .next
        .get_or_insert_with(|| now + secs(probe.initial_delay_seconds, 0));
    if now < next {
        return Verdict::Pending;
    }
    let timeout = secs(probe.timeout_seconds, 1);
    let result = if let Some(e) = &probe.exec {
        let r = exec(rt, id, e, timeout).await;
        // Each exec probe's ExecSync, timed as kubelet's prober sees it (hack/bench-probes.sh reads these).
        let ms = now.elapsed().as_secs_f64() * 1000.0;
        tracing::debug!(target: "crius_pod::probe", container = id, ms, ok = r.is_ok(), "exec probe");
        r
    } else if let Some(h) = &probe.http_get {
        http_get(c, host, h, timeout).await
    } else if let Some(t) = &probe.tcp_socket {
        tcp(c, host, t, timeout).await
    } else {
        Err("a probe kind crius does not run (grpc)".into())
    };
    // The next try is a period on, whatever this one said: a probe runs every periodSeconds, not every time
    // the engine looks.
    st.next = Some(now + secs(probe.period_seconds, 10));
    if result.is_ok() {
        st.failures = 0;
        return Verdict::Passed;
    }
    st.failures += 1;
    if st.failures >= probe.failure_threshold.unwrap_or(3).max(1) {
        return Verdict::Failed;
    }
    Verdict::Pending
}

fn secs(v: Option<i32>, default: i32) -> Duration {
    Duration::from_secs(v.unwrap_or(default).max(0) as u64)
}

/// Runs lifecycle hook `hook` (`postStart`, `preStop`), handler `h`, in container `id` within `timeout`.
pub async fn handler(
    rt: &mut RuntimeServiceClient<Channel>,
    id: &str,
    hook: &'static str,
    h: &LifecycleHandler,
    timeout: Duration,
) -> Result<(), Error> {
    let done = if let Some(e) = &h.exec {
        exec(rt, id, e, timeout).await
    } else if let Some(s) = &h.sleep {
        tokio::time::sleep(Duration::from_secs(s.seconds.max(0) as u64).min(timeout)).await;
        Ok(())
    } else {
        Err("only exec and sleep hooks are run by crius".into())
    };
    done.map_err(|reason| Error::Hook { hook, reason })
}

async fn exec(
    rt: &mut RuntimeServiceClient<Channel>,
    id: &str,
    e: &ExecAction,
    timeout: Duration,
) -> Result<(), String> {
    let r = rt
        .exec_sync(cri::ExecSyncRequest {
            container_id: id.to_string(),
            cmd: e.command.clone().unwrap_or_default(),
            timeout: timeout.as_secs().max(1) as i64,
        })
        .await
        .map_err(|s| format!("exec: {:?}: {}", s.code(), s.message()))?
        .into_inner();
    if r.exit_code == 0 {
        Ok(())
    } else {
        let out = String::from_utf8_lossy(if r.stderr.is_empty() { &r.stdout } else { &r.stderr })
            .trim()
            .to_string();
        Err(format!("exited {}: {out}", r.exit_code))
    }
}

/// A port by number or by the name of one of the container's ports.
fn port(c: &Container, p: &IntOrString) -> Result<u16, String> {
    let n = match p {
        IntOrString::Int(n) => *n,
        IntOrString::String(name) => c
            .ports
            .iter()
            .flatten()
            .find(|x| x.name.as_deref() == Some(name.as_str()))
            .map(|x| x.container_port)
            .ok_or_else(|| format!("no port named {name:?}"))?,
    };
    u16::try_from(n).map_err(|_| format!("port {n}"))
}

fn target(host: &str, explicit: Option<&String>) -> String {
    explicit.filter(|h| !h.is_empty()).cloned().unwrap_or_else(|| {
        if host.is_empty() {
            "127.0.0.1".into()
        } else {
            host.to_string()
        }
    })
}

async fn tcp(c: &Container, host: &str, t: &TCPSocketAction, timeout: Duration) -> Result<(), String> {
    let addr = (target(host, t.host.as_ref()), port(c, &t.port)?);
    tokio::time::timeout(timeout, tokio::net::TcpStream::connect(addr))
        .await
        .map_err(|_| "timed out".to_string())?
        .map(drop)
        .map_err(|e| e.to_string())
}

async fn http_get(c: &Container, host: &str, h: &HTTPGetAction, timeout: Duration) -> Result<(), String> {
    let host = target(host, h.host.as_ref());
    let port = port(c, &h.port)?;
    let path = h.path.clone().unwrap_or_else(|| "/".into());
    let talk = async {
        let mut s = tokio::net::TcpStream::connect((host.as_str(), port))
            .await
            .map_err(|e| e.to_string())?;
        let mut req = format!(
            "GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUser-Agent: crius-probe\r\nConnection: close\r\n"
        );
        for hd in h.http_headers.iter().flatten() {
            req.push_str(&format!("{}: {}\r\n", hd.name, hd.value));
        }
        req.push_str("\r\n");
        s.write_all(req.as_bytes()).await.map_err(|e| e.to_string())?;
        let mut buf = vec![0u8; 64];
        let n = s.read(&mut buf).await.map_err(|e| e.to_string())?;
        let line = String::from_utf8_lossy(&buf[..n]).to_string();
        let code: u16 = line
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .ok_or("no HTTP status")?;
        if (200..400).contains(&code) {
            Ok(())
        } else {
            Err(format!("HTTP {code}"))
        }
    };
    tokio::time::timeout(timeout, talk)
        .await
        .map_err(|_| "timed out".to_string())?
}
