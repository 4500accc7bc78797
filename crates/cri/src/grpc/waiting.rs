//! Calls that wait on a container's processes for as long as their caller allows — ExecSync (its timeout,
//! or none), StopContainer (its grace period), RemoveContainer (the stop it may do) — each run on an OS
//! thread of their own, never on tokio's blocking pool. That pool is small (criusd caps it), and every other call
//! (ContainerStatus, ListContainers, CreateContainer...) needs a place in it: fifty `sleep 30` exec probes
//! held there would leave none, and the node would stop answering. A streaming exec session's wait for its
//! process (`kubectl exec -it`, open for hours) is one of these too (`Waiting::own_thread`). A waiting
//! thread costs a stack and nothing else; at most [`MAX_WAITING`] wait at once, further ones queue without
//! holding one.
//! The places are a [`Waiting`] that criusd makes once and hands to the RuntimeService and the streaming
//! backend, so both count against one limit; no process global holds them.

use std::sync::Arc;

use tokio::sync::Semaphore;
use tonic::Status;

use crate::error::Error;

/// How many waiting calls may hold a thread at once; more queue for a place.
pub const MAX_WAITING: usize = 1024;

/// The places of waiting calls; clones share them.
#[derive(Debug, Clone)]
pub struct Waiting {
    places: Arc<Semaphore>,
}

impl Default for Waiting {
    /// [`MAX_WAITING`] places.
    fn default() -> Self {
        Waiting::new(MAX_WAITING)
    }
}

impl Waiting {
    /// `places` places: at most that many waiting calls hold a thread at once.
    pub fn new(places: usize) -> Waiting {
        Waiting {
            places: Arc::new(Semaphore::new(places)),
        }
    }

    /// Runs `f` (call `call`) on a thread of its own and answers with its result.
    pub(super) async fn on_own_thread<T: Send + 'static>(
        &self,
        call: &'static str,
        f: impl FnOnce() -> Result<T, Error> + Send + 'static,
    ) -> Result<T, Status> {
        match self.own_thread(call, f).await {
            Ok(r) => r.map_err(Status::from),
            Err(reason) => Err(Error::TaskFailed { call, reason }.into()),
        }
    }

    /// Runs `f` on a thread of its own named after `what` (once one of the places is free): its result, or
    /// why there is none (the thread could not start, or panicked).
    pub(crate) async fn own_thread<T: Send + 'static>(
        &self,
        what: &'static str,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, String> {
        let _place = self
            .places
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
            let waiting = Waiting::default();
            let t = Instant::now();
            let waits: Vec<_> = (0..64)
                .map(|_| {
                    let waiting = waiting.clone();
                    tokio::spawn(async move {
                        waiting
                            .on_own_thread("Wait", || {
                                std::thread::sleep(Duration::from_secs(2));
                                Ok(())
                            })
                            .await
                    })
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
            let e = waiting
                .on_own_thread::<()>("Boom", || panic!("boom"))
                .await
                .unwrap_err();
            assert_eq!(e.code(), tonic::Code::Internal);
            assert!(e.message().contains("Boom"), "{e:?}");
        });
    }

    #[tokio::test]
    async fn waits_past_the_places_queue_and_clones_share_them() {
        let one = Waiting::new(1);
        let other = one.clone();
        let t = Instant::now();
        let sleep = || {
            std::thread::sleep(Duration::from_millis(300));
            Ok(())
        };
        let (a, b) = tokio::join!(one.on_own_thread("A", sleep), other.on_own_thread("B", sleep));
        a.unwrap();
        b.unwrap();
        assert!(
            t.elapsed() >= Duration::from_millis(600),
            "one place: one after the other ({:?})",
            t.elapsed()
        );
    }
}
