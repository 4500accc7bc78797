//! The client against the shim's own ttrpc server, with a Task service of the test's: typed answers,
//! refusals, many calls at once on one connection, deadlines, and the end of a connection from either side.

use std::collections::HashMap;
use std::os::unix::net::UnixListener;
use std::time::Instant;

use containerd_shim_protos::ttrpc::TtrpcContext;
use containerd_shim_protos::{Task, create_task};

use super::*;
use crate::reactor::Reactor;
use crate::server::Server;

/// Answers State with the id asked for (and Kill after sleeping `signal` milliseconds); refuses Pids.
struct Echo;

impl Task for Echo {
    fn state(&self, _: &TtrpcContext, req: api::StateRequest) -> ttrpc::Result<api::StateResponse> {
        Ok(api::StateResponse {
            id: req.id,
            pid: 7,
            ..Default::default()
        })
    }

    fn kill(&self, _: &TtrpcContext, req: api::KillRequest) -> ttrpc::Result<api::Empty> {
        std::thread::sleep(Duration::from_millis(u64::from(req.signal)));
        Ok(api::Empty::default())
    }

    fn pids(&self, _: &TtrpcContext, req: api::PidsRequest) -> ttrpc::Result<api::PidsResponse> {
        Err(ttrpc::Error::RpcStatus(ttrpc::get_status(
            Code::NOT_FOUND,
            format!("no task {}", req.id),
        )))
    }
}

fn serve() -> (tempfile::TempDir, String, Arc<Reactor>) {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("shim.sock");
    let reactor = Reactor::new().unwrap();
    Server::new(create_task(Arc::new(Echo)), HashMap::new())
        .listen(&reactor, UnixListener::bind(&sock).unwrap())
        .unwrap();
    let r = reactor.clone();
    std::thread::spawn(move || r.run());
    (dir, format!("unix://{}", sock.display()), reactor)
}

fn ctx(ms: u64) -> Context {
    ttrpc::context::with_timeout(ms as i64 * 1_000_000)
}

fn state(c: &TaskClient, id: &str) -> Result<api::StateResponse> {
    c.state(
        ctx(10_000),
        &api::StateRequest {
            id: id.into(),
            ..Default::default()
        },
    )
}

#[test]
fn calls_get_their_typed_answers_and_refusals_keep_their_code() {
    let (_dir, addr, _r) = serve();
    let c = TaskClient::dial(&addr).unwrap();
    let st = state(&c, "c1").unwrap();
    assert_eq!((st.id.as_str(), st.pid), ("c1", 7));
    let refused = c.pids(
        ctx(10_000),
        &api::PidsRequest {
            id: "c2".into(),
            ..Default::default()
        },
    );
    match refused {
        Err(Error::Refused { code, message }) => {
            assert_eq!((code, message.as_str()), (Code::NOT_FOUND, "no task c2"));
        }
        other => panic!("{other:?}"),
    }
    // A method the service leaves to the generated default is refused by the server, not lost.
    assert!(matches!(
        c.stats(ctx(10_000), &api::StatsRequest::default()),
        Err(Error::Refused { .. })
    ));
}

#[test]
fn concurrent_calls_on_one_connection_each_get_their_own_answer() {
    let (_dir, addr, _r) = serve();
    let c = TaskClient::dial(&addr).unwrap();
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let c = c.clone();
            std::thread::spawn(move || {
                for i in 0..50 {
                    let id = format!("t{t}-{i}");
                    assert_eq!(state(&c, &id).unwrap().id, id);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

#[test]
fn a_late_answer_is_a_deadline_error_and_the_connection_goes_on() {
    let (_dir, addr, _r) = serve();
    let c = TaskClient::dial(&addr).unwrap();
    let t = Instant::now();
    let late = c.kill(
        ctx(100),
        &api::KillRequest {
            signal: 600,
            ..Default::default()
        },
    );
    let took = t.elapsed();
    match late {
        Err(Error::Timeout { method, deadline }) => {
            assert_eq!((method.as_str(), deadline), ("Kill", Duration::from_millis(100)));
        }
        other => panic!("{other:?}"),
    }
    assert!(
        took >= Duration::from_millis(100) && took < Duration::from_millis(500),
        "{took:?}"
    );
    // The late answer arrives meanwhile and is dropped; the next call gets its own.
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(state(&c, "after").unwrap().id, "after");
    // No deadline: the call waits as long as it takes.
    c.kill(
        ttrpc::context::with_timeout(0),
        &api::KillRequest {
            signal: 50,
            ..Default::default()
        },
    )
    .unwrap();
}

#[test]
fn a_shim_that_goes_fails_the_waiting_call_at_once_and_later_ones_too() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("shim.sock");
    let listener = UnixListener::bind(&sock).unwrap();
    let c = TaskClient::dial(&format!("unix://{}", sock.display())).unwrap();
    let (conn, _) = listener.accept().unwrap();
    let closer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        drop(conn);
    });
    let t = Instant::now();
    let gone = state(&c, "c1");
    assert!(matches!(&gone, Err(Error::Closed(_))), "{gone:?}");
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "not the call's 10 s deadline"
    );
    closer.join().unwrap();
    assert!(matches!(state(&c, "c1"), Err(Error::Closed(_))));
}

#[test]
fn dropping_the_last_handle_closes_the_connection() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("shim.sock");
    let listener = UnixListener::bind(&sock).unwrap();
    let c = TaskClient::dial(&sock.display().to_string()).unwrap();
    let (mut conn, _) = listener.accept().unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let other = c.clone();
    drop(c);
    drop(other);
    let mut b = [0u8; 1];
    assert_eq!(conn.read(&mut b).unwrap(), 0, "the client's side shut down");
}

#[test]
fn an_address_nobody_serves_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let err = TaskClient::dial(&format!("unix://{}/none", dir.path().display()))
        .err()
        .unwrap();
    assert_eq!(err.kind(), std::io::ErrorKind::NotFound);
    assert!(TaskClient::dial("unix://@crius-no-such-abstract-socket").is_err());
}

/// A server whose ExecSync answers after 50 ms, from a thread of its own, with 3 MiB on each stream (the
/// answer is over ttrpc's 4 MiB frame); and one without ExecSync (an older shim).
fn serve_exec_sync(with: bool) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("shim.sock");
    let reactor = Reactor::new().unwrap();
    let exec_sync: crate::server::Deferred = Box::new(|req, reply: crate::server::Reply| {
        let req = ExecSyncRequest::decode(&req.payload).unwrap();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            let a = ExecSyncResponse {
                exit_status: req.timeout_ms as u32,
                timed_out: false,
                stdout: vec![b'o'; 3 << 20],
                stderr: req.process,
            };
            reply.send_raw(Ok(a.encode()));
        });
    });
    let path = format!("/{}/{}", crate::exec_sync::SERVICE, crate::exec_sync::METHOD);
    let detached = if with {
        HashMap::from([(path, exec_sync)])
    } else {
        HashMap::new()
    };
    Server::with_detached(create_task(Arc::new(Echo)), HashMap::new(), detached)
        .listen(&reactor, UnixListener::bind(&sock).unwrap())
        .unwrap();
    std::thread::spawn(move || reactor.run());
    (dir, format!("unix://{}", sock.display()))
}

fn exec_sync_req(timeout_ms: u64) -> ExecSyncRequest {
    ExecSyncRequest {
        id: "c1".into(),
        exec_id: "e1".into(),
        process: vec![b'e'; 3 << 20],
        timeout_ms,
    }
}

#[test]
fn exec_sync_is_answered_to_a_function_and_its_big_answer_arrives_whole() {
    let (_dir, addr) = serve_exec_sync(true);
    let c = TaskClient::dial(&addr).unwrap();
    let (tx, rx) = mpsc::channel();
    let t = Instant::now();
    c.exec_sync_then(&exec_sync_req(3), 0, move |r| {
        let _ = tx.send(r);
    })
    .unwrap();
    // The caller was not held: the answer comes 50 ms later.
    assert!(t.elapsed() < Duration::from_millis(50));
    let a = rx.recv_timeout(Duration::from_secs(10)).unwrap().unwrap();
    assert_eq!(a.exit_status, 3);
    assert_eq!((a.stdout.len(), a.stderr.len()), (3 << 20, 3 << 20));
    // The connection serves on; a forgotten call's function is dropped uncalled.
    assert_eq!(state(&c, "c9").unwrap().id, "c9");
    let (tx, rx) = mpsc::channel::<Result<ExecSyncResponse>>();
    let call = c
        .exec_sync_then(&exec_sync_req(1), 0, move |r| {
            let _ = tx.send(r);
        })
        .unwrap();
    c.forget(call);
    assert!(matches!(
        rx.recv_timeout(Duration::from_secs(1)),
        Err(RecvTimeoutError::Disconnected)
    ));
}

#[test]
fn exec_sync_of_an_older_shim_is_refused_as_unimplemented() {
    let (_dir, addr) = serve_exec_sync(false);
    let c = TaskClient::dial(&addr).unwrap();
    let (tx, rx) = mpsc::channel();
    c.exec_sync_then(&exec_sync_req(1), 0, move |r| {
        let _ = tx.send(r);
    })
    .unwrap();
    match rx.recv_timeout(Duration::from_secs(10)).unwrap() {
        Err(Error::Refused { code, message }) => {
            assert_eq!(code, Code::UNIMPLEMENTED);
            assert!(message.contains("crius.shim.v1.Exec/ExecSync"), "{message}");
        }
        other => panic!("{other:?}"),
    }
}
