//! A pull leaves the async workers free while it builds its HTTP clients. Building one reads the system's CA
//! certificates, which took criusd's worker for seconds in a slow VM, and critest's next connection went
//! unanswered. Here the certificates are a FIFO (`SSL_CERT_FILE`), so reading them waits until someone
//! writes: on a runtime of one thread, a pull that read them there would keep the test's own task (the
//! writer) from ever running, and only the watchdog thread could end the wait. Its own binary: the variable
//! is the process's.

use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crius_image::Store;
use crius_image::pull::{PullOptions, pull};

/// Waits until someone opens the FIFO for reading (or `stop`), then puts a plain file with the host's CA bundle
/// at its path for every later reader and writes the bundle to this one whole: true if it fed a reader.
fn feed(fifo: &Path, stop: &AtomicBool) -> bool {
    let pem = std::fs::read("/etc/ssl/certs/ca-certificates.crt").unwrap_or_default();
    loop {
        if stop.load(Ordering::SeqCst) {
            return false;
        }
        // Non-blocking: ENXIO while nobody reads.
        match OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(fifo)
        {
            Ok(w) => {
                let plain = fifo.with_extension("plain");
                std::fs::write(&plain, &pem).unwrap();
                std::fs::rename(&plain, fifo).unwrap();
                // Blocking from here: the reader gets the whole bundle, then EOF.
                let flags = nix::fcntl::fcntl(&w, nix::fcntl::FcntlArg::F_GETFL).unwrap();
                let flags = nix::fcntl::OFlag::from_bits_truncate(flags) & !nix::fcntl::OFlag::O_NONBLOCK;
                nix::fcntl::fcntl(&w, nix::fcntl::FcntlArg::F_SETFL(flags)).unwrap();
                let mut w = w;
                let _ = w.write_all(&pem);
                return true;
            }
            Err(_) => std::thread::sleep(Duration::from_millis(5)),
        }
    }
}

#[test]
fn building_the_clients_does_not_hold_an_async_worker() {
    let dir = tempfile::tempdir().unwrap();
    let fifo: PathBuf = dir.path().join("certs.pem");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    // SAFETY: this binary's only test sets it before any thread of its own starts.
    unsafe { std::env::set_var("SSL_CERT_FILE", &fifo) };
    let store = Store::open(&dir.path().join("store")).unwrap();
    // Set once the test's own task has fed the reader (or the pull is over).
    let fed = Arc::new(AtomicBool::new(false));

    // The watchdog: if the runtime's thread is stuck reading the FIFO, the test's task never runs to feed it; after
    // 20 s the watchdog feeds it instead (and the test fails). A slow pull does not trip it: only an unfed reader.
    let watchdog = {
        let (fifo, fed) = (fifo.clone(), fed.clone());
        std::thread::spawn(move || {
            let start = Instant::now();
            while start.elapsed() < Duration::from_secs(20) {
                if fed.load(Ordering::SeqCst) {
                    return false;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            feed(&fifo, &fed)
        })
    };

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (result, fed_by_test) = rt.block_on(async {
        // Port 1 on loopback: nobody listens, so the pull ends Unavailable once its clients are built.
        let pull =
            tokio::spawn(
                async move { pull(&store, "127.0.0.1:1/critest/none:1", &PullOptions::default()).await },
            );
        // The pull task runs first; this task gets the thread back only if the pull gave it up.
        tokio::task::yield_now().await;
        let feeder = {
            let (fifo, fed) = (fifo.clone(), fed.clone());
            tokio::task::spawn_blocking(move || {
                let ok = feed(&fifo, &fed);
                fed.store(true, Ordering::SeqCst);
                ok
            })
        };
        let result = pull.await.unwrap();
        fed.store(true, Ordering::SeqCst);
        (result, feeder.await.unwrap())
    });
    fed.store(true, Ordering::SeqCst);
    let rescued = watchdog.join().unwrap();
    assert!(
        !rescued,
        "the pull read the certificates on the async worker: only the watchdog could end the wait"
    );
    assert!(
        fed_by_test,
        "the certificates were never read: the test no longer sees what a pull builds"
    );
    assert!(
        result.is_err(),
        "nothing listens on 127.0.0.1:1, yet the pull succeeded"
    );
}
