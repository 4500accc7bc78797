//! ExecSync in the shim (`exec_sync.rs`) against the fake runtime of `tests.rs`: output captured and capped,
//! the exec gone afterwards without an event, the timeout kept.

use std::sync::mpsc::channel;
use std::time::{Duration, Instant};

use super::tests::Fixture;
use super::*;
use crate::exec_sync::{ExecSyncRequest, ExecSyncResponse, MAX_OUTPUT};

fn exec_sync(f: &Fixture, exec_id: &str, args: &str, timeout_ms: u64) -> Result<ExecSyncResponse> {
    let (tx, rx) = channel();
    let req = ExecSyncRequest {
        id: "c1".into(),
        exec_id: exec_id.into(),
        process: format!(r#"{{"args":["{args}"]}}"#).into_bytes(),
        timeout_ms,
    };
    f.tasks.exec_sync(req, move |r| {
        let _ = tx.send(r);
    });
    rx.recv_timeout(Duration::from_secs(20))
        .expect("ExecSync answered")
}

fn running() -> Fixture {
    let f = Fixture::new();
    f.create("c1").unwrap();
    f.tasks.start("c1", "").unwrap();
    let _ = (f.event(), f.event()); // create, start
    f
}

#[test]
fn exec_sync_answers_exit_and_output_and_leaves_no_exec() {
    let f = running();
    let t = Instant::now();
    let r = exec_sync(&f, "e1", "quick", 10_000).unwrap();
    assert_eq!(
        (r.exit_status, r.timed_out, &r.stdout[..], &r.stderr[..]),
        (3, false, &b"out\n"[..], &b"err\n"[..])
    );
    assert!(
        t.elapsed() < exec_sync::DRAIN,
        "answered at the end of the output, took {:?}",
        t.elapsed()
    );
    assert!(
        matches!(f.tasks.state("c1", "e1"), Err(Error::NotFound(_))),
        "deleted"
    );
    // The exec id is free again, and no timer of the first call fires into the second.
    let r = exec_sync(&f, "e2", "quick", 0).unwrap();
    assert_eq!(r.exit_status, 3);
    // Its caller heard the end in the answer: no exec event went out.
    f.no_event();
}

#[test]
fn exec_sync_output_is_capped_and_read_to_its_end() {
    let f = running();
    let r = exec_sync(&f, "e1", "big", 0).unwrap();
    assert_eq!((r.exit_status, r.stdout.len()), (0, MAX_OUTPUT));
}

#[test]
fn exec_sync_over_its_timeout_is_killed_and_says_so() {
    let f = running();
    let t = Instant::now();
    let r = exec_sync(&f, "e1", "sleep", 300).unwrap();
    let took = t.elapsed();
    assert!(r.timed_out);
    assert_eq!(r.exit_status, 137);
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_millis(1500),
        "took {took:?}"
    );
    assert!(matches!(f.tasks.state("c1", "e1"), Err(Error::NotFound(_))));
}

#[test]
fn exec_sync_in_a_container_not_running_is_refused() {
    let f = Fixture::new();
    f.create("c1").unwrap();
    assert!(matches!(
        exec_sync(&f, "e1", "quick", 1000),
        Err(Error::NotRunning { .. })
    ));
    assert!(matches!(
        exec_sync(&f, "", "quick", 1000),
        Err(Error::InvalidArgument(_))
    ));
}
