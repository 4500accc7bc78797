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
    /// The start of its ticks (see [`Ticks`]), set at its first run.
    anchor: Option<Instant>,
}

/// When a pod's probes tick, as kubelet's prober ticks them: each probe has its own ticker, started when the
/// pod was added, after a random part of a period when the prober itself had started less than a period
/// before (kubelet: so that the pods taken up at its start do not all probe at the same moments). A probe
/// runs at its ticks, every periodSeconds on a grid that does not drift; its first run, though, comes as soon
/// as its container is seen running (past initialDelaySeconds), as kubelet runs a readiness probe at once
/// when a container starts.
#[derive(Debug, Clone, Copy)]
pub struct Ticks {
    /// When the pod was added.
    pub added: Instant,
    /// How long after the engine's start it was added; None: no random part.
    pub since_start: Option<Duration>,
}

impl Ticks {
    /// The start of the ticks of a probe of period `period`, `fraction` (in [0, 1)) being its random part.
    fn anchor(&self, period: Duration, fraction: f64) -> Instant {
        match self.since_start {
            Some(age) if age < period => self.added + period.mul_f64(fraction.clamp(0.0, 1.0)),
            _ => self.added,
        }
    }
}

/// The tick of the grid of `anchor` and `period` at which a probe that ran at `ran` runs next: the first at
/// least half a period after it (so a run a little late on its tick keeps the next tick, and two runs are
/// never less than half a period apart).
fn next_tick(anchor: Instant, period: Duration, ran: Instant) -> Instant {
    if period.is_zero() {
        return ran;
    }
    let earliest = ran + period / 2;
    if earliest <= anchor {
        return anchor;
    }
    let since = (earliest - anchor).as_nanos();
    let p = period.as_nanos();
    let k = since.div_ceil(p);
    anchor + Duration::from_nanos(u64::try_from(k * p).unwrap_or(u64::MAX))
}

/// A fraction in [0, 1) that differs from call to call (std's per-process random hash keys; no generator
/// needed for a phase).
fn random_fraction() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(0);
    (h.finish() >> 11) as f64 / (1u64 << 53) as f64
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

/// Runs `probe` against container `id` (of spec `c`, in a pod at `host`, whose probes tick as `ticks` says)
/// if it is due.
pub async fn probe(
    rt: &mut RuntimeServiceClient<Channel>,
    id: &str,
    c: &Container,
    host: &str,
    probe: &Probe,
    st: &mut ProbeState,
    ticks: Ticks,
) -> Verdict {
    let now = Instant::now();
    let period = secs(probe.period_seconds, 10);
    let anchor = *st
        .anchor
        .get_or_insert_with(|| ticks.anchor(period, random_fraction()));
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
    // The next try is at its next tick, whatever this one said: a probe runs every periodSeconds, not every
    // time the engine looks.
    st.next = Some(next_tick(anchor, period, now));
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

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn ticks_stay_on_their_grid_and_keep_half_a_period_apart() {
        let a = Instant::now();
        // On its tick, or a little late: the next tick.
        assert_eq!(next_tick(a, S, a), a + S);
        assert_eq!(next_tick(a, S, a + S * 3 + Duration::from_millis(40)), a + S * 4);
        // A first run between ticks: the first tick at least half a period on.
        assert_eq!(next_tick(a, S, a + Duration::from_millis(300)), a + S);
        assert_eq!(next_tick(a, S, a + Duration::from_millis(700)), a + S * 2);
        // A run before the grid starts: its start, if half a period away.
        assert_eq!(next_tick(a + S * 2, S, a), a + S * 2);
        assert_eq!(next_tick(a, Duration::ZERO, a + S), a + S);
    }

    #[test]
    fn only_a_pod_added_within_a_period_of_the_start_gets_a_random_phase() {
        let added = Instant::now();
        let young = Ticks {
            added,
            since_start: Some(Duration::from_millis(200)),
        };
        assert_eq!(young.anchor(S, 0.25), added + S / 4);
        assert_eq!(young.anchor(S * 10, 0.5), added + S * 5);
        let old = Ticks {
            added,
            since_start: Some(S * 2),
        };
        assert_eq!(old.anchor(S, 0.25), added);
        let unknown = Ticks {
            added,
            since_start: None,
        };
        assert_eq!(unknown.anchor(S, 0.25), added);
    }

    #[test]
    fn random_fractions_are_in_range_and_differ() {
        let f: Vec<f64> = (0..64).map(|_| random_fraction()).collect();
        assert!(f.iter().all(|x| (0.0..1.0).contains(x)), "{f:?}");
        let mut sorted = f.clone();
        sorted.sort_by(f64::total_cmp);
        sorted.dedup();
        assert!(sorted.len() > 60, "{f:?}");
        // Spread over the range, not bunched.
        assert!(f.iter().any(|x| *x < 0.3) && f.iter().any(|x| *x > 0.7), "{f:?}");
    }
}
