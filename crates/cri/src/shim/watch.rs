//! Knowing at once that a pod's shim died: the shim's pid comes from its socket (`SO_PEERCRED`), a pidfd of
//! it joins one poll set, and one thread calls back when a pidfd turns readable (the process ended). Without
//! this, a container whose shim was SIGKILLed would stay RUNNING in the records until someone asked the
//! shim, which is exactly the per-container call that status-from-events avoids.

use std::collections::HashMap;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex};

type OnGone = Arc<dyn Fn(&str) + Send + Sync>;

/// The shims being watched.
pub(super) struct Watch {
    shared: Arc<Shared>,
}

struct Shared {
    /// pid → (pidfd, sandbox id).
    watched: Mutex<HashMap<i32, (OwnedFd, String)>>,
    /// Written to wake the poller when the set changed.
    wake: OwnedFd,
}

fn pidfd_open(pid: i32) -> std::io::Result<OwnedFd> {
    // SAFETY: pidfd_open(2) takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a descriptor the kernel just gave us, owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

fn eventfd() -> std::io::Result<OwnedFd> {
    // SAFETY: eventfd(2) returns a new descriptor or -1.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: as above.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The pid of the process serving the unix socket at `address` (`unix:///path`).
fn server_pid(address: &str) -> std::io::Result<i32> {
    let s = UnixStream::connect(address.trim_start_matches("unix://"))?;
    let cred = nix::sys::socket::getsockopt(&s, nix::sys::socket::sockopt::PeerCredentials)?;
    Ok(cred.pid())
}

impl Watch {
    /// Starts the watcher thread.
    pub(super) fn start(on_gone: OnGone) -> std::io::Result<Watch> {
        let shared = Arc::new(Shared {
            watched: Mutex::new(HashMap::new()),
            wake: eventfd()?,
        });
        let s = shared.clone();
        std::thread::Builder::new()
            .name("shim-watch".into())
            .spawn(move || s.run(&*on_gone))?;
        Ok(Watch { shared })
    }

    /// Watches the shim of `sandbox` that serves `address`. Best effort: a shim that cannot be watched is
    /// still used; its death is then found by the next call that fails to reach it.
    pub(super) fn add(&self, sandbox: &str, address: &str) {
        match server_pid(address).and_then(|pid| Ok((pid, pidfd_open(pid)?))) {
            Ok((pid, fd)) => self.insert(sandbox, pid, fd),
            Err(e) => tracing::warn!(sandbox, "cannot watch the pod's shim at {address}: {e}"),
        }
    }

    /// Watches process `pid` (its pidfd `fd`) as sandbox `sandbox`'s shim.
    fn insert(&self, sandbox: &str, pid: i32, fd: OwnedFd) {
        let mut w = self.shared.lock();
        // The pod has a new shim: the old one's end (it left once it had no container) must not make the new
        // shim's containers UNKNOWN.
        w.retain(|p, (_, s)| s != sandbox || *p == pid);
        // A reconnection to a shim already watched keeps the first pidfd.
        w.entry(pid).or_insert_with(|| (fd, sandbox.to_string()));
        drop(w);
        let one = 1u64.to_ne_bytes();
        // SAFETY: an 8-byte write to our eventfd.
        unsafe { libc::write(self.shared.wake.as_raw_fd(), one.as_ptr().cast(), 8) };
    }
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<i32, (OwnedFd, String)>> {
        self.watched.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn run(&self, on_gone: &(dyn Fn(&str) + Send + Sync)) {
        loop {
            let (pids, mut fds): (Vec<i32>, Vec<libc::pollfd>) = {
                let w = self.lock();
                let pids: Vec<i32> = w.keys().copied().collect();
                let fds = pids
                    .iter()
                    .map(|p| libc::pollfd {
                        fd: w[p].0.as_fd().as_raw_fd(),
                        events: libc::POLLIN,
                        revents: 0,
                    })
                    .chain(std::iter::once(libc::pollfd {
                        fd: self.wake.as_raw_fd(),
                        events: libc::POLLIN,
                        revents: 0,
                    }))
                    .collect();
                (pids, fds)
            };
            // SAFETY: poll on descriptors of ours. One that insert() closes meanwhile (a pod's old shim) or
            // whose number is reused reports for a pid no longer in the map, which is skipped below.
            let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, -1) };
            if n < 0 {
                continue;
            }
            let mut buf = [0u8; 8];
            // SAFETY: an 8-byte read from our non-blocking eventfd (clears it).
            unsafe { libc::read(self.wake.as_raw_fd(), buf.as_mut_ptr().cast(), 8) };
            for (pid, p) in pids.iter().zip(&fds) {
                if p.revents == 0 {
                    continue;
                }
                let gone = self.lock().remove(pid);
                if let Some((_, sandbox)) = gone {
                    tracing::info!(sandbox = %sandbox, pid, "the pod's shim exited");
                    on_gone(&sandbox);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::time::Duration;

    use super::*;

    fn watcher() -> (Watch, mpsc::Receiver<String>) {
        let (tx, rx) = mpsc::channel();
        let tx = Mutex::new(tx);
        let w = Watch::start(Arc::new(move |s: &str| {
            let _ = tx.lock().unwrap().send(s.to_string());
        }))
        .unwrap();
        (w, rx)
    }

    fn child() -> (std::process::Child, i32, OwnedFd) {
        let c = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let pid = c.id() as i32;
        (c, pid, pidfd_open(pid).unwrap())
    }

    #[test]
    fn a_dying_shim_is_reported_once() {
        let (w, rx) = watcher();
        let (mut c, pid, fd) = child();
        w.insert("pod-a", pid, fd);
        assert!(rx.recv_timeout(Duration::from_millis(300)).is_err(), "alive");
        c.kill().unwrap();
        c.wait().unwrap();
        assert_eq!(rx.recv_timeout(Duration::from_secs(5)).unwrap(), "pod-a");
        assert!(rx.recv_timeout(Duration::from_millis(200)).is_err(), "once");
    }

    #[test]
    fn the_end_of_a_pods_old_shim_is_not_its_new_shims() {
        let (w, rx) = watcher();
        let (mut old, old_pid, old_fd) = child();
        let (mut new, new_pid, new_fd) = child();
        w.insert("pod-a", old_pid, old_fd);
        w.insert("pod-a", new_pid, new_fd);
        old.kill().unwrap();
        old.wait().unwrap();
        assert!(
            rx.recv_timeout(Duration::from_millis(500)).is_err(),
            "the old shim's end is not reported"
        );
        new.kill().unwrap();
        new.wait().unwrap();
        assert_eq!(rx.recv_timeout(Duration::from_secs(5)).unwrap(), "pod-a");
    }

    #[test]
    fn the_pid_serving_a_socket() {
        let d = tempfile::tempdir().unwrap();
        let sock = d.path().join("s");
        let _listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        let address = format!("unix://{}", sock.display());
        assert_eq!(server_pid(&address).unwrap(), std::process::id() as i32);
    }
}
