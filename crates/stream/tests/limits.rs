//! Limits of the streaming server, alone in their binary (they count the process's fds and tasks): bad
//! clients leave nothing and the server keeps serving; 50 sessions at once.

#[allow(dead_code)]
mod local;

use std::time::Duration;

use crius_stream::client::{self, Transport};
use crius_stream::status::Outcome;
use local::{exec, read_all, server, stdio};
use tokio::io::AsyncWriteExt;

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

fn fd_count() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| !s.contains(") Z "))
        .unwrap_or(false)
}

/// Bad input, one server for all of it: each case ends with a clear error, leaves no process, and the server
/// keeps serving.
async fn bad_clients_leave_nothing_and_the_server_keeps_serving() {
    use tokio::io::AsyncReadExt;
    let (s, backend) = server().await;
    let base = s.local_addr();
    let echo_ok = || async {
        let url = s.url(exec(&["echo", "ok"], false)).unwrap();
        let (io, cap) = stdio(None);
        assert_eq!(
            client::remote_command(&url, Transport::Spdy, io).await.unwrap(),
            Outcome::Success
        );
        assert_eq!(read_all(cap.out).await, "ok\n");
    };
    echo_ok().await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let fds = fd_count();

    // A malformed SPDY frame after the upgrade: the session ends, its process with it.
    for (transport, upgrade) in [
        (
            "SPDY",
            "Upgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\n",
        ),
        (
            "WebSocket",
            "Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Protocol: v5.channel.k8s.io\r\n",
        ),
    ] {
        let url = s.url(exec(&["sleep", "30"], true)).unwrap();
        let path = url.split_once(&base.to_string()).unwrap().1.to_string();
        let mut tcp = tokio::net::TcpStream::connect(base).await.unwrap();
        let req = format!("GET {path} HTTP/1.1\r\nHost: {base}\r\nConnection: Upgrade\r\n{upgrade}\r\n");
        tcp.write_all(req.as_bytes()).await.unwrap();
        let mut head = [0u8; 12];
        tcp.read_exact(&mut head).await.unwrap();
        assert!(
            head.starts_with(b"HTTP/1.1 101"),
            "{transport}: {:?}",
            String::from_utf8_lossy(&head)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
        // Garbage: a control frame of version 9 for SPDY; reserved bits and an unmasked frame for WebSocket.
        tcp.write_all(&[
            0x80, 0x09, 0x00, 0x01, 0x00, 0x00, 0x00, 0x04, 1, 2, 3, 4, 0xff, 0xff, 0xff,
        ])
        .await
        .unwrap();
        let mut rest = Vec::new();
        let r = tokio::time::timeout(Duration::from_secs(10), tcp.read_to_end(&mut rest)).await;
        assert!(r.is_ok(), "{transport}: the server closes the connection");
    }
    // A client that goes away mid-stream: its process is killed.
    let url = s.url(exec(&["sleep", "30"], false)).unwrap();
    let (io, _cap) = stdio(None);
    let session = tokio::spawn(async move { client::remote_command(&url, Transport::WebSocket, io).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    session.abort();
    // A client that never reads: the server's memory stays bounded while the process is held up.
    let before = rss_kib();
    let url = s
        .url(exec(&["head", "-c", "200000000", "/dev/zero"], false))
        .unwrap();
    let (io, cap) = stdio(None);
    let stuck = tokio::spawn(async move { client::remote_command(&url, Transport::Spdy, io).await });
    tokio::time::sleep(Duration::from_secs(2)).await;
    let grown = rss_kib().saturating_sub(before);
    assert!(
        grown < 64 * 1024,
        "RSS grew by {grown} KiB under a client that never reads"
    );
    stuck.abort();
    drop(cap);
    // Every process started is gone, and the fds are back.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let left: Vec<u32> = backend
            .pids
            .lock()
            .unwrap()
            .iter()
            .copied()
            .filter(|p| alive(*p))
            .collect();
        if left.is_empty() {
            break;
        }
        if tokio::time::Instant::now() >= deadline {
            let cmds: Vec<String> = left
                .iter()
                .map(|p| std::fs::read_to_string(format!("/proc/{p}/cmdline")).unwrap_or_default())
                .collect();
            panic!("processes left: {left:?} {cmds:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(fd_count() <= fds + 2, "fds: {fds} before, {} after", fd_count());
    echo_ok().await;
}

/// 50 sessions at once, on both transports: all of them right, nothing left after.
async fn fifty_concurrent_sessions() {
    let (s, _) = server().await;
    let tasks_before = tokio::runtime::Handle::current().metrics().num_alive_tasks();
    let fds = fd_count();
    let mut all = Vec::new();
    for i in 0..50 {
        let t = if i % 2 == 0 {
            Transport::Spdy
        } else {
            Transport::WebSocket
        };
        let url = s
            .url(exec(&["sh", "-c", &format!("sleep 0.5; echo {i}")], false))
            .unwrap();
        all.push(tokio::spawn(async move {
            let (io, cap) = stdio(None);
            let o = client::remote_command(&url, t, io).await.unwrap();
            (o, read_all(cap.out).await, i)
        }));
    }
    for a in all {
        let (o, out, i) = tokio::time::timeout(Duration::from_secs(30), a)
            .await
            .unwrap()
            .unwrap();
        assert_eq!((o, out), (Outcome::Success, format!("{i}\n")));
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let tasks_after = tokio::runtime::Handle::current().metrics().num_alive_tasks();
    assert!(
        tasks_after <= tasks_before,
        "tasks: {tasks_before} before, {tasks_after} after"
    );
    assert!(fd_count() <= fds, "fds: {fds} before, {} after", fd_count());
}

/// One test, so that nothing else in this process opens fds meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits() {
    bad_clients_leave_nothing_and_the_server_keeps_serving().await;
    fifty_concurrent_sessions().await;
}
