//! Capturing an exec's output for ExecSync: two FIFOs in a directory of the container's bundle, which the
//! shim writes the process's stdout and stderr to. Readers are opened first (so the shim's open never waits)
//! and drained by a thread each while the process runs, so a chatty process never blocks on a full pipe.
//! Once it exited, output still buffered is read for a moment more; a background child that keeps the
//! streams open does not hold the call forever.

use std::fs::File;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// How long output is still read after the process exited.
const DRAIN: Duration = Duration::from_secs(2);
/// The most output kept per stream (kubelet's own cap for exec probes is 16 MiB).
const MAX_OUTPUT: usize = 16 << 20;

/// The two output FIFOs of one exec.
pub(super) struct Capture {
    dir: PathBuf,
    files: std::sync::Mutex<Option<(File, File)>>,
    readers: std::sync::Mutex<Vec<JoinHandle<Vec<u8>>>>,
    done: Arc<AtomicBool>,
}

fn fifo(path: &Path) -> Result<File> {
    super::stream::mkfifo("ExecSync", path)?;
    super::stream::open("ExecSync", path, true, false)
}

/// Reads `f` until EOF, or until `done` has been set for [`DRAIN`].
fn drain(mut f: File, done: Arc<AtomicBool>) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    let mut since: Option<Instant> = None;
    loop {
        if done.load(Ordering::SeqCst) {
            let t = *since.get_or_insert_with(Instant::now);
            if t.elapsed() > DRAIN {
                break;
            }
        }
        let mut p = libc::pollfd {
            fd: f.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: poll on one valid pollfd.
        if unsafe { libc::poll(&mut p, 1, 100) } <= 0 {
            continue;
        }
        match f.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                let room = MAX_OUTPUT.saturating_sub(out.len());
                out.extend_from_slice(&buf[..n.min(room)]);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    out
}

impl Capture {
    /// Makes `dir` with the FIFOs `stdout` and `stderr`, opened for reading.
    pub fn new(dir: &Path) -> Result<Capture> {
        std::fs::create_dir_all(dir)
            .map_err(|e| Error::io(format!("ExecSync: creating {}", dir.display()), e))?;
        let out = fifo(&dir.join("stdout"))?;
        let err = fifo(&dir.join("stderr"))?;
        Ok(Capture {
            dir: dir.to_path_buf(),
            files: std::sync::Mutex::new(Some((out, err))),
            readers: std::sync::Mutex::new(Vec::new()),
            done: Arc::new(AtomicBool::new(false)),
        })
    }

    /// The stdout FIFO's path.
    pub fn stdout_path(&self) -> String {
        self.dir.join("stdout").display().to_string()
    }

    /// The stderr FIFO's path.
    pub fn stderr_path(&self) -> String {
        self.dir.join("stderr").display().to_string()
    }

    /// The process started (the shim holds the write ends): start draining.
    pub fn started(&self) {
        let Some((out, err)) = self.files.lock().unwrap_or_else(|p| p.into_inner()).take() else {
            return;
        };
        let mut readers = self.readers.lock().unwrap_or_else(|p| p.into_inner());
        for f in [out, err] {
            let done = self.done.clone();
            let spawned = std::thread::Builder::new()
                .name("exec-output".into())
                .spawn(move || drain(f, done));
            if let Ok(h) = spawned {
                readers.push(h);
            }
        }
    }

    /// The process ended: what it wrote to stdout and stderr (empty if it never started).
    pub fn finish(&self) -> (Vec<u8>, Vec<u8>) {
        self.done.store(true, Ordering::SeqCst);
        let readers = std::mem::take(&mut *self.readers.lock().unwrap_or_else(|p| p.into_inner()));
        let mut outs: Vec<Vec<u8>> = readers
            .into_iter()
            .map(|h| h.join().unwrap_or_default())
            .collect();
        outs.resize(2, Vec::new());
        let err = outs.pop().unwrap_or_default();
        let out = outs.pop().unwrap_or_default();
        (out, err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn output_is_captured_until_the_writers_close() {
        let d = tempfile::tempdir().unwrap();
        let cap = Capture::new(&d.path().join("x")).unwrap();
        let mut w1 = std::fs::OpenOptions::new()
            .write(true)
            .open(cap.stdout_path())
            .unwrap();
        let mut w2 = std::fs::OpenOptions::new()
            .write(true)
            .open(cap.stderr_path())
            .unwrap();
        cap.started();
        let big = vec![b'x'; 200_000];
        w1.write_all(&big).unwrap();
        w2.write_all(b"oops").unwrap();
        drop((w1, w2));
        let (out, err) = cap.finish();
        assert_eq!(out.len(), big.len());
        assert_eq!(err, b"oops");
    }
}
