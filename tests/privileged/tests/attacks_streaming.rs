//! Attacks on criusd's streaming server and its HTTP servers (issue 25, items 4 to 6), each tried against a
//! real criusd with a host-network pod, whose port-forwards reach the test's own listeners on 127.0.0.1:
//! - a stalled port-forward pushed 512 MiB of 64 KiB SPDY frames on 4 streams: criusd's RSS stays within
//!   64 MiB of idle; a 16 MiB frame ends the session; streams past `max_streams` and sessions past
//!   `max_sessions` are refused with the protocol's error;
//! - 128 port-forward connects hanging on a listener whose backlog is full: ContainerStatus, ListContainers,
//!   ListPodSandbox and Version still answer in under 100 ms;
//! - 1,100 idle TCP connections to the streaming port and as many to the metrics port: CRI calls answer,
//!   criusd's descriptors stay bounded, and an idle connection is closed after the header deadline.

use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use crius_api::cri;
use crius_privileged_tests::cri::{Pod, container};
use crius_stream::spdy::frame::{Codec, Frame, Headers, MAX_DATA_FRAME, RST_REFUSED_STREAM};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// criusd's resident memory, KiB.
fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

fn fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap().count()
}

/// A listener on 127.0.0.1 that accepts every connection and never reads from it.
fn stalled_listener() -> (
    u16,
    std::thread::JoinHandle<()>,
    std::sync::Arc<std::sync::atomic::AtomicBool>,
) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    l.set_nonblocking(true).unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let s = stop.clone();
    let t = std::thread::spawn(move || {
        let mut held = Vec::new();
        while !s.load(std::sync::atomic::Ordering::Relaxed) {
            match l.accept() {
                Ok((c, _)) => held.push(c),
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    });
    (port, t, stop)
}

async fn port_forward_url(p: &mut Pod, port: u16) -> String {
    p.c.port_forward(cri::PortForwardRequest {
        pod_sandbox_id: p.id.clone(),
        port: vec![i32::from(port)],
    })
    .await
    .unwrap()
    .into_inner()
    .url
}

/// A raw SPDY port-forward client: the upgraded connection and its codec.
struct Raw {
    tcp: TcpStream,
    codec: Codec,
}

impl Raw {
    async fn connect(url: &str) -> Raw {
        let (tcp, _) = crius_stream::spdy_client::upgrade(url, &[crius_stream::protocol::PORT_FORWARD])
            .await
            .unwrap();
        Raw {
            tcp,
            codec: Codec::new(),
        }
    }

    fn syn(&mut self, out: &mut BytesMut, id: u32, kind: &str, port: u16, request: u32) {
        let headers: Headers = [
            ("streamtype", kind.to_string()),
            ("port", port.to_string()),
            ("requestid", request.to_string()),
        ]
        .into_iter()
        .collect();
        let f = Frame::SynStream {
            stream_id: id,
            associated_to: 0,
            priority: 0,
            slot: 0,
            fin: false,
            unidirectional: false,
            headers,
        };
        self.codec.encode(&f, out).unwrap();
    }

    /// Reads frames for `wait`: the RST_STREAM statuses and whether a GOAWAY or the end came.
    async fn read_for(&mut self, wait: Duration) -> (Vec<u32>, bool) {
        let mut buf = BytesMut::new();
        let mut rst = Vec::new();
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            while let Ok(Some(f)) = self.codec.decode(&mut buf) {
                match f {
                    Frame::RstStream { status, .. } => rst.push(status),
                    Frame::GoAway { .. } => return (rst, true),
                    _ => {}
                }
            }
            match tokio::time::timeout_at(deadline, self.tcp.read_buf(&mut buf)).await {
                Ok(Ok(0)) | Ok(Err(_)) => return (rst, true),
                Ok(Ok(_)) => {}
                Err(_) => return (rst, false),
            }
        }
    }
}

/// Issue 25 item 4: memory of a stalled port-forward, frame and stream limits.
async fn stalled_port_forward() {
    let mut p = Pod::on_host_network("pf-stalled").await;
    let pid = p.d.pid();
    let (port, listener, stop) = stalled_listener();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let idle = rss_kib(pid);

    // A 16 MiB DATA frame: the session ends on its header.
    let mut raw = Raw::connect(&port_forward_url(&mut p, port).await).await;
    let mut out = BytesMut::new();
    raw.syn(&mut out, 1, "data", port, 0);
    out.extend_from_slice(&[0, 0, 0, 1, 0, 0xff, 0xff, 0xff]);
    raw.tcp.write_all(&out).await.unwrap();
    let (_, ended) = raw.read_for(Duration::from_secs(5)).await;
    assert!(ended, "a 16 MiB frame did not end the session");

    // 200 streams on one session: those past the limit (64) are refused.
    let mut raw = Raw::connect(&port_forward_url(&mut p, port).await).await;
    let mut out = BytesMut::new();
    for i in 0..200u32 {
        // Data streams whose error stream never comes: each waits for its pair, open.
        raw.syn(&mut out, 1 + 2 * i, "data", port, i);
    }
    raw.tcp.write_all(&out).await.unwrap();
    let (rst, _) = raw.read_for(Duration::from_secs(3)).await;
    let refused = rst.iter().filter(|s| **s == RST_REFUSED_STREAM).count();
    assert_eq!(refused, 200 - 64, "RST_STREAM statuses: {rst:?}");
    drop(raw);

    // 512 MiB through 4 pairs to a listener that never reads, from a client that never reads either.
    let mut raw = Raw::connect(&port_forward_url(&mut p, port).await).await;
    let mut out = BytesMut::new();
    for r in 0..4u32 {
        raw.syn(&mut out, 1 + 4 * r, "error", port, r);
        raw.syn(&mut out, 3 + 4 * r, "data", port, r);
    }
    raw.tcp.write_all(&out).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let payload = Bytes::from(vec![b'x'; MAX_DATA_FRAME]);
    let total: usize = 512 << 20;
    let mut pushed = 0usize;
    let mut peak = idle;
    let mut stalled = false;
    let mut i = 0u32;
    let mut codec = Codec::new();
    while pushed < total {
        let mut frame = BytesMut::new();
        let f = Frame::Data {
            stream_id: 3 + 4 * (i % 4),
            fin: false,
            data: payload.clone(),
        };
        codec.encode(&f, &mut frame).unwrap();
        i += 1;
        match tokio::time::timeout(Duration::from_secs(3), raw.tcp.write_all(&frame)).await {
            Ok(Ok(())) => pushed += payload.len(),
            Ok(Err(e)) => panic!("the session broke after {pushed} bytes: {e}"),
            Err(_) => {
                stalled = true;
                break;
            }
        }
        if i.is_multiple_of(64) {
            peak = peak.max(rss_kib(pid));
        }
    }
    for _ in 0..10 {
        peak = peak.max(rss_kib(pid));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!(
        "stalled port-forward: {} MiB pushed of {} MiB (stalled: {stalled}); criusd RSS {idle} KiB idle, peak {peak} KiB (+{} KiB)",
        pushed >> 20,
        total >> 20,
        peak - idle
    );
    assert!(peak - idle < 64 * 1024, "criusd grew by {} KiB", peak - idle);
    drop(raw);

    // Sessions past max_sessions are refused (503), and the others go on.
    std::fs::write(p.d.config_path(), "[stream]\nmax_sessions = 2\n").unwrap();
    p.restart_daemon().await;
    let a = Raw::connect(&port_forward_url(&mut p, port).await).await;
    let b = Raw::connect(&port_forward_url(&mut p, port).await).await;
    let url = port_forward_url(&mut p, port).await;
    let e = crius_stream::spdy_client::upgrade(&url, &[crius_stream::protocol::PORT_FORWARD])
        .await
        .unwrap_err();
    assert!(
        e.to_string().contains("503") && e.to_string().contains("max_sessions"),
        "{e}"
    );
    drop((a, b));
    tokio::time::sleep(Duration::from_millis(500)).await;
    // The refused client may try again with its token.
    crius_stream::spdy_client::upgrade(&url, &[crius_stream::protocol::PORT_FORWARD])
        .await
        .unwrap();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    listener.join().unwrap();
}

/// A listener on 127.0.0.1 with a backlog of 0 that never accepts, its backlog filled by the test: a connect
/// to it hangs. Returns the port and what must stay open meanwhile (the listener, the connections queued).
fn full_listener() -> (u16, Vec<Box<dyn Send>>) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    // listen(2) again on a listening socket sets its backlog: 0, the smallest.
    // SAFETY: a plain syscall on a descriptor `l` owns.
    assert_eq!(unsafe { libc::listen(l.as_raw_fd(), 0) }, 0);
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut keep: Vec<Box<dyn Send>> = Vec::new();
    for _ in 0..4 {
        if let Ok(s) = std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(300)) {
            keep.push(Box::new(s));
        }
    }
    // Check: one more connect hangs.
    let probe = std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(500));
    assert!(probe.is_err(), "the listener's backlog is not full");
    keep.push(Box::new(l));
    (port, keep)
}

/// The slowest of a round of the calls kubelet's PLEG and status loop make.
async fn slowest_cri_round(p: &mut Pod, id: &str) -> Duration {
    let mut worst = Duration::ZERO;
    for _ in 0..3 {
        let t = Instant::now();
        p.c.container_status(cri::ContainerStatusRequest {
            container_id: id.into(),
            verbose: false,
        })
        .await
        .unwrap();
        worst = worst.max(t.elapsed());
        let t = Instant::now();
        p.c.list_containers(cri::ListContainersRequest::default())
            .await
            .unwrap();
        worst = worst.max(t.elapsed());
        let t = Instant::now();
        p.c.list_pod_sandbox(cri::ListPodSandboxRequest::default())
            .await
            .unwrap();
        worst = worst.max(t.elapsed());
        let t = Instant::now();
        p.c.version(cri::VersionRequest::default()).await.unwrap();
        worst = worst.max(t.elapsed());
    }
    worst
}

/// Issue 25 item 5: 128 port-forward connects that hang do not hold the threads CRI calls need.
async fn hanging_connects() {
    let mut p = Pod::on_host_network("pf-hang").await;
    let id = p
        .started(container("sleeper", "busybox:latest", "exec sleep 3600"))
        .await;
    let (port, keep) = full_listener();
    let before = slowest_cri_round(&mut p, &id).await;
    let idle_fds = fds(p.d.pid());
    // 4 WebSocket sessions of 32 ports each (64 streams, the limit per session): 128 connects at once.
    let ports = vec![port.to_string(); 32].join(",");
    let mut sessions = Vec::new();
    for _ in 0..4 {
        let url = format!("{}?ports={ports}", port_forward_url(&mut p, port).await);
        let (ws, _) = crius_stream::client::connect_ws(&url, crius_stream::protocol::PORT_FORWARD)
            .await
            .unwrap();
        sessions.push(ws);
    }
    // One more port than the limit allows is refused, naming it.
    let url = format!(
        "{}?ports={}",
        port_forward_url(&mut p, port).await,
        vec![port.to_string(); 33].join(",")
    );
    let e = crius_stream::client::connect_ws(&url, crius_stream::protocol::PORT_FORWARD)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("max_streams"), "{e}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Each hanging connect holds a socket in criusd: they are in flight.
    let in_flight = fds(p.d.pid()) - idle_fds;
    assert!(
        in_flight >= 128,
        "only {in_flight} more fds in criusd: the connects are not hanging"
    );
    let t = Instant::now();
    let mut worst = Duration::ZERO;
    // The connects wait up to 10 s: measure while they hang.
    while t.elapsed() < Duration::from_secs(6) {
        worst = worst.max(slowest_cri_round(&mut p, &id).await);
    }
    let threads = std::fs::read_to_string(format!("/proc/{}/status", p.d.pid()))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("Threads:").map(|v| v.trim().to_string()))
        .unwrap();
    println!(
        "128 hanging port-forward connects ({in_flight} more fds in criusd): slowest CRI call {worst:?} (before them {before:?}); criusd has {threads} threads"
    );
    assert!(worst < Duration::from_millis(100), "a CRI call took {worst:?}");
    drop(sessions);
    drop(keep);
}

/// Up to `n` connections to `addr`, made at once, each given `wait` to connect (past the server's cap they
/// wait in, or are dropped from, its backlog).
async fn flood(addr: std::net::SocketAddr, n: usize, wait: Duration) -> Vec<std::net::TcpStream> {
    let all: Vec<_> = (0..n)
        .map(|_| tokio::spawn(tokio::time::timeout(wait, TcpStream::connect(addr))))
        .collect();
    let mut held = Vec::new();
    for c in all {
        if let Ok(Ok(Ok(s))) = c.await {
            held.push(s.into_std().unwrap());
        }
    }
    held
}

/// How many of `conns` the server closed (a read gives EOF or an error, not "would block").
fn closed(conns: &[std::net::TcpStream]) -> usize {
    conns
        .iter()
        .filter(|c| {
            c.set_nonblocking(true).unwrap();
            let mut b = [0u8; 1];
            !matches!(std::io::Read::read(&mut &**c, &mut b), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
        })
        .count()
}

/// Issue 25 item 6: idle connections to the streaming and metrics ports.
async fn idle_connection_flood() {
    // The test's own descriptors: its soft limit up to its hard one.
    let (_, hard) = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE).unwrap();
    nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE, hard, hard).unwrap();
    let metrics_port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mut p = Pod::on_host_network("idle-flood").await;
    std::fs::write(
        p.d.config_path(),
        format!("metrics_address = \"127.0.0.1:{metrics_port}\"\n"),
    )
    .unwrap();
    p.restart_daemon().await;
    let pid = p.d.pid();
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let nofile: Vec<&str> = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap()
        .split_whitespace()
        .collect();
    assert_eq!(
        nofile[3], nofile[4],
        "criusd's RLIMIT_NOFILE soft limit is not its hard one: {nofile:?}"
    );
    let id = p
        .started(container("sleeper", "busybox:latest", "exec sleep 3600"))
        .await;
    let url = port_forward_url(&mut p, 80).await;
    let stream_addr: std::net::SocketAddr = url
        .trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let metrics_addr = std::net::SocketAddr::from(([127, 0, 0, 1], metrics_port));
    let idle_fds = fds(pid);
    let t = Instant::now();
    let streaming = flood(stream_addr, 1100, Duration::from_secs(1)).await;
    let metrics = flood(metrics_addr, 1100, Duration::from_secs(1)).await;
    let during = fds(pid);
    let worst = slowest_cri_round(&mut p, &id).await;
    println!(
        "{} + {} idle connections held to the streaming and metrics ports (of 1100 each, in {:?}): criusd {idle_fds} fds idle, {during} during; slowest CRI call {worst:?}",
        streaming.len(),
        metrics.len(),
        t.elapsed()
    );
    assert!(during <= idle_fds + 256 + 64 + 16, "criusd holds {during} fds");
    assert!(worst < Duration::from_secs(1), "a CRI call took {worst:?}");
    // Those accepted first, silent, are closed at the header deadline (10 s).
    tokio::time::sleep(Duration::from_secs(12).saturating_sub(t.elapsed())).await;
    let worst = worst.max(slowest_cri_round(&mut p, &id).await);
    let (gone_s, gone_m) = (closed(&streaming), closed(&metrics));
    println!(
        "after {:?}: {gone_s} streaming and {gone_m} metrics connections closed by criusd; slowest CRI call {worst:?}",
        t.elapsed()
    );
    assert!(gone_s >= 200, "only {gone_s} streaming connections closed");
    assert!(gone_m >= 50, "only {gone_m} metrics connections closed");
    drop((streaming, metrics));
    // Once the flood is gone, the servers serve again.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut s = std::net::TcpStream::connect(metrics_addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    std::io::Write::write_all(
        &mut s,
        b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .unwrap();
    let mut text = String::new();
    let _ = std::io::Read::read_to_string(&mut s, &mut text);
    assert!(text.starts_with("HTTP/1.1 200"), "{text:.200}");
    let mut s = std::net::TcpStream::connect(stream_addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    std::io::Write::write_all(&mut s, b"GET /nothing HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut head = [0u8; 12];
    std::io::Read::read_exact(&mut s, &mut head).unwrap();
    assert_eq!(&head, b"HTTP/1.1 404");
}

macro_rules! attacks {
    ($($name:ident),*) => {
        $(#[tokio::test(flavor = "multi_thread")]
        #[ignore = "needs root: run through hack/test.sh"]
        async fn $name() {
            crius_test_support::require_root();
            super::$name().await
        })*
    };
}

mod host {
    attacks!(stalled_port_forward, hanging_connects, idle_connection_flood);
}
