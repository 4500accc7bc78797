//! Property test of the ttrpc server with the shim's real Task service (no containers: only calls that find
//! none, so nothing is run or mounted): each case opens a connection and writes random bytes, frames with
//! random headers (lengths up to 4 GiB announced, stream ids, types, flags) and requests with random
//! services, methods and payloads, then closes its side. Within a deadline the server must close or answer
//! with well-formed response frames only, and then serve a Connect on a fresh connection. A header announcing
//! more than it sends must not make the server reserve what it announced (checked on the process's peak
//! virtual size).

use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use containerd_shim_protos::api;
use containerd_shim_protos::protobuf::Message;
use containerd_shim_protos::ttrpc::{Request, Response};
use proptest::prelude::*;

use super::{MAX_FRAME, TYPE_REQUEST, TYPE_RESPONSE, WRITE_TIMEOUT, frame, take_frame};
use crate::reactor::Reactor;
use crate::task::Tasks;

const DEADLINE: Duration = Duration::from_secs(10);

/// One shim server for every case (so what one case leaves behind meets the next): its socket path.
fn server() -> &'static PathBuf {
    static SOCK: OnceLock<(tempfile::TempDir, PathBuf)> = OnceLock::new();
    &SOCK
        .get_or_init(|| {
            let dir = tempfile::tempdir().unwrap();
            let sock = dir.path().join("shim.sock");
            let reactor = Reactor::new().unwrap();
            let (tx, _events) = std::sync::mpsc::channel();
            // Installed but not driven: no call here starts a process, and a second reaping thread would take
            // the exits the task tests' reaper waits for.
            let reaper = crate::reaper::Reaper::install().unwrap();
            let tasks = Tasks::new("proptest", reaper, Arc::new(tx), reactor.clone());
            crate::service::server(tasks)
                .listen(&reactor, UnixListener::bind(&sock).unwrap())
                .unwrap();
            std::thread::spawn(move || reactor.run());
            (dir, sock)
        })
        .1
}

/// Methods that, with no container in the shim, only look and answer (Create, Exec, Delete, Shutdown and the
/// like are left out: they would run a runtime, mount, or stop the server).
const METHODS: &[&str] = &[
    "Connect",
    "State",
    "Pids",
    "Stats",
    "Wait",
    "Kill",
    "CloseIO",
    "ResizePty",
    "Nope",
    "",
];

#[derive(Debug, Clone)]
enum Chunk {
    Bytes(Vec<u8>),
    /// A header as given, then `payload` (which may be shorter or longer than announced).
    Frame {
        len: u32,
        stream: u32,
        kind: u8,
        flags: u8,
        payload: Vec<u8>,
    },
    /// A whole request frame.
    Call {
        stream: u32,
        service: bool,
        method: usize,
        id: String,
        payload: Option<Vec<u8>>,
        timeout: i64,
    },
}

fn chunk() -> impl Strategy<Value = Chunk> {
    let len = prop_oneof![
        0u32..64,
        Just(u32::MAX),
        Just(MAX_FRAME as u32),
        Just(MAX_FRAME as u32 + 1),
        any::<u32>(),
    ];
    let bytes = || prop::collection::vec(any::<u8>(), 0..200);
    prop_oneof![
        1 => bytes().prop_map(Chunk::Bytes),
        2 => (len, any::<u32>(), prop_oneof![Just(1u8), Just(2), any::<u8>()], any::<u8>(), bytes())
            .prop_map(|(len, stream, kind, flags, payload)| Chunk::Frame { len, stream, kind, flags, payload }),
        3 => (
            any::<u32>(),
            prop::bool::weighted(0.9),
            0..METHODS.len(),
            "[a-z0-9]{0,8}|.{0,4}",
            prop::option::weighted(0.3, bytes()),
            any::<i64>(),
        )
            .prop_map(|(stream, service, method, id, payload, timeout)| Chunk::Call {
                stream,
                service,
                method,
                id,
                payload,
                timeout,
            }),
    ]
}

fn request(service: &str, method: &str, payload: Vec<u8>, timeout: i64) -> Vec<u8> {
    let mut r = Request::new();
    r.service = service.into();
    r.method = method.into();
    r.payload = payload;
    r.timeout_nano = timeout;
    r.write_to_bytes().unwrap()
}

fn bytes_of(c: &Chunk) -> Vec<u8> {
    match c {
        Chunk::Bytes(b) => b.clone(),
        Chunk::Frame {
            len,
            stream,
            kind,
            flags,
            payload,
        } => {
            let mut f = len.to_be_bytes().to_vec();
            f.extend_from_slice(&stream.to_be_bytes());
            f.extend_from_slice(&[*kind, *flags]);
            f.extend_from_slice(payload);
            f
        }
        Chunk::Call {
            stream,
            service,
            method,
            id,
            payload,
            timeout,
        } => {
            let service = if *service {
                "containerd.task.v2.Task"
            } else {
                "containerd.task.v2.Nope"
            };
            // A well-formed message of the method (its id is the first field in all of them), or junk.
            let body = payload.clone().unwrap_or_else(|| {
                api::StateRequest {
                    id: id.clone(),
                    ..Default::default()
                }
                .write_to_bytes()
                .unwrap()
            });
            frame(
                *stream,
                TYPE_REQUEST,
                &request(service, METHODS[*method], body, *timeout),
            )
        }
    }
}

/// Reads until the server closes or the deadline; the frames received.
fn read_all(mut s: UnixStream) -> Result<Vec<(u32, u8, Vec<u8>)>, String> {
    let started = Instant::now();
    s.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
    let (mut buf, mut chunk) = (Vec::new(), [0u8; 4096]);
    loop {
        match s.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            // Reset by a server that closed with our bytes unread.
            Err(_) => break,
        }
        if started.elapsed() > DEADLINE {
            return Err(format!("no end after {DEADLINE:?}"));
        }
    }
    let mut frames = Vec::new();
    while let Some(f) = take_frame(&mut buf).map_err(|e| e.to_string())? {
        frames.push(f);
    }
    if !buf.is_empty() {
        return Err(format!("{} bytes of a partial frame at the end", buf.len()));
    }
    Ok(frames)
}

/// A Connect on a fresh connection is answered.
fn connect_works() -> Result<(), String> {
    let mut s = UnixStream::connect(server()).map_err(|e| e.to_string())?;
    let body = api::ConnectRequest {
        id: "c".into(),
        ..Default::default()
    }
    .write_to_bytes()
    .unwrap();
    s.write_all(&frame(
        1,
        TYPE_REQUEST,
        &request("containerd.task.v2.Task", "Connect", body, 0),
    ))
    .map_err(|e| e.to_string())?;
    s.shutdown(std::net::Shutdown::Write).unwrap();
    let frames = read_all(s)?;
    let [(1, TYPE_RESPONSE, payload)] = &frames[..] else {
        return Err(format!("answered {frames:?}"));
    };
    let res = Response::parse_from_bytes(payload).map_err(|e| e.to_string())?;
    let ok = api::ConnectResponse::parse_from_bytes(&res.payload).map_err(|e| e.to_string())?;
    if res.status.code.value() != 0 || ok.shim_pid != std::process::id() {
        return Err(format!("answered {res:?}"));
    }
    Ok(())
}

fn check(chunks: &[Chunk]) -> Result<(), TestCaseError> {
    let mut s = UnixStream::connect(server()).unwrap();
    for c in chunks {
        // The server may close first (a frame over the limit): the rest is not sent.
        if s.write_all(&bytes_of(c)).is_err() {
            break;
        }
    }
    let _ = s.shutdown(std::net::Shutdown::Write);
    let frames = read_all(s).map_err(TestCaseError::fail)?;
    for (_, kind, payload) in &frames {
        prop_assert_eq!(*kind, TYPE_RESPONSE);
        prop_assert!(
            Response::parse_from_bytes(payload).is_ok(),
            "a reply that is no Response"
        );
    }
    connect_works().map_err(TestCaseError::fail)?;
    Ok(())
}

/// The process's peak virtual size, bytes.
fn vm_peak() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb = status.lines().find_map(|l| l.strip_prefix("VmPeak:")).unwrap();
    kb.trim().trim_end_matches(" kB").trim().parse::<u64>().unwrap() * 1024
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 5000,
        max_shrink_iters: 100,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn garbage_is_refused_and_the_server_serves_on(chunks in prop::collection::vec(chunk(), 0..8)) {
        check(&chunks)?;
    }
}

/// Headers announcing up to 4 GiB, each followed by a few bytes, on many connections at once: the server
/// buffers what arrives, not what is announced.
#[test]
fn announced_lengths_are_not_reserved() {
    let before = vm_peak();
    let conns: Vec<UnixStream> = [u32::MAX, MAX_FRAME as u32, MAX_FRAME as u32 - 1, 1 << 30]
        .iter()
        .cycle()
        .take(64)
        .map(|&len| {
            let mut s = UnixStream::connect(server()).unwrap();
            let mut f = frame(1, TYPE_REQUEST, b"");
            f[..4].copy_from_slice(&len.to_be_bytes());
            f.extend_from_slice(&[0; 100]);
            s.write_all(&f).unwrap();
            s
        })
        .collect();
    // Every connection is read before the Connect on a new one is.
    connect_works().unwrap();
    let grown = vm_peak().saturating_sub(before);
    // Reserving one announced 4 GiB frame would be 4 GiB; other tests' threads in this binary stay far below 1.
    assert!(grown < 1 << 30, "the peak virtual size grew by {grown} bytes");
    drop(conns);
}

/// A client that sends requests and never reads the replies: once its socket is full, the server stops
/// writing to it after WRITE_TIMEOUT and serves others. Before, the loop thread blocked in the write for good.
#[test]
fn a_client_that_never_reads_does_not_stop_the_server() {
    let mut s = UnixStream::connect(server()).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(1))).unwrap();
    // Undecodable requests: each is answered from the loop thread.
    let f = frame(1, TYPE_REQUEST, &[0xff, 0xff]);
    for _ in 0..100_000 {
        if s.write_all(&f).is_err() {
            break;
        }
    }
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(connect_works()));
    let fresh = rx.recv_timeout(WRITE_TIMEOUT * 3);
    assert!(matches!(fresh, Ok(Ok(()))), "{fresh:?}");
    drop(s);
}
