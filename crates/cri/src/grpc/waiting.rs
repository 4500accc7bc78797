//! Calls that wait on a container's processes for as long as their caller allows — ExecSync (its timeout,
//! or none), StopContainer (its grace period), RemoveContainer (the stop it may do) — each run on an OS
//! thread of their own, never on tokio's blocking pool. That pool is small (criusd caps it), and every other call
//! (ContainerStatus, ListContainers, CreateContainer...) needs a place in it: fifty `sleep 30` exec probes
//! held there would leave none, and the node would stop answering. A streaming exec session's wait for its
//! process (`kubectl exec -it`, open for hours) is one of these too ([`own_thread`]). A waiting thread costs
//! a stack and nothing else; at most [`MAX_WAITING`] wait at once, further ones queue without holding one.

use std::sync::LazyLock;

use tokio::sync::Semaphore;
use tonic::Status;

use crate::error::Error;

/// How many waiting calls may hold a thread at once; more queue for a place.
pub const MAX_WAITING: usize = 1024;

static PLACES: LazyLock<Semaphore> = LazyLock::new(|| Semaphore::new(MAX_WAITING));

/// Runs `f` (call `call`) on a thread of its own and answers with its result.
pub(super) async fn on_own_thread<T: Send + 'static>(
    call: &'static str,
    f: impl FnOnce() -> Result<T, Error> + Send + 'static,
) -> Result<T, Status> {
    match own_thread(call, f).await {
        Ok(r) => r.map_err(Status::from),
        Err(reason) => Err(Error::TaskFailed { call, reason }.into()),
    }
}

/// Runs `f` on a thread of its own named after `what` (once one of the [`MAX_WAITING`] places is free): its
/// result, or why there is none (the thread could not start, or panicked).
pub(crate) async fn own_thread<T: Send + 'static>(
    what: &'static str,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, String> {
    let _place = PLACES
        .acquire()
        .await
        .map_err(|e| format!("no place to wait: {e}"))?;
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name(format!("crius-{}", what.to_ascii_lowercase()))
        .spawn(move || {
            // A panic drops `tx`: the caller hears the call failed.
            let _ = tx.send(f());
        })
        .map_err(|e| format!("starting its thread: {e}"))?;
    rx.await.map_err(|_| "the call's thread panicked".to_string())
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    #[test]
    fn many_long_waits_leave_the_blocking_pool_free() {
        // criusd's shape, with a blocking pool of 2: 64 waits of 2 s at once still leave it free.
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .max_blocking_threads(2)
            .enable_time()
            .build()
            .unwrap();
        rt.block_on(async {
            let t = Instant::now();
            let waits: Vec<_> = (0..64)
                .map(|_| {
                    tokio::spawn(on_own_thread("Wait", || {
                        std::thread::sleep(Duration::from_secs(2));
                        Ok(())
                    }))
                })
                .collect();
            tokio::time::sleep(Duration::from_millis(100)).await;
            let quick = Instant::now();
            tokio::task::spawn_blocking(|| ()).await.unwrap();
            assert!(
                quick.elapsed() < Duration::from_millis(500),
                "{:?}",
                quick.elapsed()
            );
            for w in waits {
                w.await.unwrap().unwrap();
            }
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "the waits ran at once: {:?}",
                t.elapsed()
            );
            let e = on_own_thread::<()>("Boom", || panic!("boom")).await.unwrap_err();
            assert_eq!(e.code(), tonic::Code::Internal);
            assert!(e.message().contains("Boom"), "{e:?}");
        });
    }
}
