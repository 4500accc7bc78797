//! `kubectl logs` for one container: its CRI log file read as kubelet reads it for the API server, and written
//! as `kubectl logs` prints it.
//!
//! The file is the one the shim writes at `<pod log_directory>/<container>/<attempt>.log` ([`file()`]), one
//! record a line (`record`). What [`stream`] gives is the containers' lines: each record's text, the partial
//! (`P`) records of a stream joined to the full (`F`) one that ends their line, each line ending in `\n`, both
//! streams in the order their lines ended in the file. A line not in the CRI format is passed on as it is.
//!
//! With `follow`, it goes on reading as the file grows. kubelet rotates a log by renaming it and asking the
//! runtime to reopen it (`ReopenContainerLog`): when a new file appears at the path, the old one is read to
//! its end and the new one from its start (a record written to the old file in the instant of the reopen may
//! be missed, as with kubelet). A file cut shorter (truncated in place) is read again from its start. The
//! file is looked at every [`POLL`].

#[cfg(test)]
mod fuzz;
mod tail;
#[cfg(test)]
mod tests;

pub use crius_common::cri_log::{Record, Stream, parse, parse_time};

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use tokio::sync::{mpsc, watch};

use crate::Error;

/// How often a followed file is looked at for more.
pub const POLL: Duration = Duration::from_millis(100);
/// How much is read, and sent at most, at a time.
const STEP: usize = 256 * 1024;
/// The longest line given whole: a partial line (or a line of a file not in the CRI format) that grows past
/// this is given as a line of its own, and the rest as another, so that memory stays bounded.
const LINE_MAX: usize = 1 << 20;

/// What to give of a log, as `kubectl logs` asks for it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogOptions {
    /// Keep reading as the file grows (`-f`), until the container stops running.
    pub follow: bool,
    /// Only the last N lines (`--tail N`); all when None.
    pub tail_lines: Option<u64>,
    /// Each line prefixed by its time, as written in the file (RFC3339Nano), and a space (`--timestamps`).
    /// A joined line has the time of its first part.
    pub timestamps: bool,
    /// Only lines from this time on (`--since`, `--since-time`), by the time of their first part; applied
    /// after `tail_lines`, as kubelet does. Lines without a time (not in the CRI format) are kept.
    pub since: Option<SystemTime>,
}

/// The log file of `container`'s `attempt` (its restart count, 0 for the first run) in the pod's
/// `log_directory`: `<log_directory>/<container>/<attempt>.log`, where the engine asks the runtime to write it.
pub fn file(log_directory: &Path, container: &str, attempt: u32) -> PathBuf {
    log_directory.join(container).join(format!("{attempt}.log"))
}

/// Writes to `out` what `kubectl logs` prints of the log at `path`, in chunks (each a whole number of lines).
///
/// Without `follow` it returns at the file's end. With it, it goes on reading as the file grows (and across a
/// rotation, see the module doc) until `running` turns false (or its sender is dropped): then it reads what
/// is left and returns. A closed `out` (the client went away) ends it at once, with Ok. An unfinished line
/// still there at the end is given with a newline.
///
/// A missing or unreadable file is an [`Error::Io`] naming it; so is a read that fails.
pub async fn stream(
    path: &Path,
    opts: &LogOptions,
    running: watch::Receiver<bool>,
    out: mpsc::Sender<Vec<u8>>,
) -> Result<(), Error> {
    run(path, opts, running, out).await.map(|_| ())
}

/// [`stream`], returning how many bytes of the file it read.
async fn run(
    path: &Path,
    opts: &LogOptions,
    mut running: watch::Receiver<bool>,
    out: mpsc::Sender<Vec<u8>>,
) -> Result<u64, Error> {
    let context = format!("reading log {}", path.display());
    let (p, o) = (path.to_path_buf(), opts.clone());
    let mut reader = blocking(move || Reader::open(p, &o))
        .await
        .map_err(Error::io(format!("opening log {}", path.display())))?;
    let mut stopping = false;
    loop {
        loop {
            let (r, chunk) = blocking(move || {
                let mut r = reader;
                let chunk = r.step();
                chunk.map(|c| (r, c))
            })
            .await
            .map_err(Error::io(context.clone()))?;
            reader = r;
            let Some(chunk) = chunk else { break };
            if !chunk.is_empty() && out.send(chunk).await.is_err() {
                return Ok(reader.read);
            }
        }
        if !opts.follow {
            break;
        }
        if reader.reopen_if_rotated() {
            continue;
        }
        if stopping {
            break;
        }
        if !*running.borrow_and_update() {
            stopping = true;
            continue;
        }
        tokio::select! {
            changed = running.changed() => stopping |= changed.is_err(),
            () = out.closed() => return Ok(reader.read),
            () = tokio::time::sleep(POLL) => {}
        }
    }
    let rest = reader.finish();
    if !rest.is_empty() {
        let _ = out.send(rest).await;
    }
    Ok(reader.read)
}

/// Runs blocking file work off the async threads.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> io::Result<T> + Send + 'static) -> io::Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .unwrap_or_else(|e| Err(io::Error::other(e)))
}

/// Opens a log, not following a symlink in its place (criusd reads it as root).
fn open(path: &Path) -> io::Result<File> {
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(path)
}

/// A log file being read forwards, and the lines it has not finished yet.
struct Reader {
    path: PathBuf,
    file: File,
    /// The open file's device and inode, to know a new one at the path.
    id: (u64, u64),
    /// Where the next read starts.
    pos: u64,
    /// Bytes of the file read, tail search included.
    read: u64,
    /// The start of a physical line whose newline is not read yet.
    pending: Vec<u8>,
    /// Lines completed outside [`Reader::step`], which its next call gives first.
    held: Vec<u8>,
    /// Per stream (stdout, stderr): the time and text of a line given so far only in partial records.
    partial: [Option<(Vec<u8>, Vec<u8>)>; 2],
    timestamps: bool,
    since: Option<SystemTime>,
}

impl Reader {
    /// Opens `path` at the start of what `opts` asks for.
    fn open(path: PathBuf, opts: &LogOptions) -> io::Result<Reader> {
        let file = open(&path)?;
        let meta = file.metadata()?;
        let (pos, read) = match opts.tail_lines {
            Some(n) => tail::start_of_last(&file, meta.len(), n)?,
            None => (0, 0),
        };
        Ok(Reader {
            path,
            file,
            id: (meta.dev(), meta.ino()),
            pos,
            read,
            pending: Vec::new(),
            held: Vec::new(),
            partial: [None, None],
            timestamps: opts.timestamps,
            since: opts.since,
        })
    }

    /// Reads on from where it stopped: the lines completed, or None at the end of the file.
    fn step(&mut self) -> io::Result<Option<Vec<u8>>> {
        let mut buf = vec![0u8; STEP];
        self.file.seek(SeekFrom::Start(self.pos))?;
        let n = self.file.read(&mut buf)?;
        if n == 0 {
            return Ok((!self.held.is_empty()).then(|| std::mem::take(&mut self.held)));
        }
        self.pos += n as u64;
        self.read += n as u64;
        let mut out = std::mem::take(&mut self.held);
        out.reserve(n + n / 4);
        let mut data = &buf[..n];
        while let Some(nl) = data.iter().position(|b| *b == b'\n') {
            if self.pending.is_empty() {
                self.line(&data[..nl], &mut out);
            } else {
                let mut line = std::mem::take(&mut self.pending);
                line.extend_from_slice(&data[..nl]);
                self.line(&line, &mut out);
            }
            data = &data[nl + 1..];
        }
        self.pending.extend_from_slice(data);
        if self.pending.len() > LINE_MAX {
            let line = std::mem::take(&mut self.pending);
            self.line(&line, &mut out);
        }
        Ok(Some(out))
    }

    /// Takes one physical line (without its newline), writing to `out` the line it completes, if any.
    fn line(&mut self, line: &[u8], out: &mut Vec<u8>) {
        let Some(r) = parse(line) else {
            self.emit(None, line, out);
            return;
        };
        let slot = r.stream as usize;
        if r.partial {
            let (_, text) = self.partial[slot].get_or_insert_with(|| (r.time.to_vec(), Vec::new()));
            text.extend_from_slice(r.text);
            if text.len() > LINE_MAX
                && let Some((time, text)) = self.partial[slot].take()
            {
                self.emit(Some(&time), &text, out);
            }
        } else if let Some((time, mut text)) = self.partial[slot].take() {
            text.extend_from_slice(r.text);
            self.emit(Some(&time), &text, out);
        } else {
            self.emit(Some(r.time), r.text, out);
        }
    }

    /// Writes a line to `out`, unless `since` leaves it out.
    fn emit(&self, time: Option<&[u8]>, text: &[u8], out: &mut Vec<u8>) {
        if let (Some(since), Some(t)) = (self.since, time.and_then(parse_time))
            && t < since
        {
            return;
        }
        if self.timestamps
            && let Some(time) = time
        {
            out.extend_from_slice(time);
            out.push(b' ');
        }
        out.extend_from_slice(text);
        out.push(b'\n');
    }

    /// After the end was reached: switches to a new file at the path (the old one renamed), or back to the
    /// start of one cut shorter. True if it did, and there may be more to read.
    fn reopen_if_rotated(&mut self) -> bool {
        let Ok(meta) = std::fs::symlink_metadata(&self.path) else {
            // Renamed, and not reopened yet: the old file may still grow.
            return false;
        };
        if (meta.dev(), meta.ino()) != self.id {
            let Ok(file) = open(&self.path) else {
                return false;
            };
            let Ok(meta) = file.metadata() else {
                return false;
            };
            // A record the old file ends in the middle of will not be finished there.
            let line = std::mem::take(&mut self.pending);
            if !line.is_empty() {
                let mut out = std::mem::take(&mut self.held);
                self.line(&line, &mut out);
                self.held = out;
            }
            (self.file, self.id, self.pos) = (file, (meta.dev(), meta.ino()), 0);
            return true;
        }
        if meta.len() < self.pos {
            self.pos = 0;
            self.pending.clear();
            return true;
        }
        false
    }

    /// At the end: what is still unfinished, each as a line (the unfinished record, then stdout's partial
    /// line, then stderr's).
    fn finish(&mut self) -> Vec<u8> {
        let mut out = std::mem::take(&mut self.held);
        let line = std::mem::take(&mut self.pending);
        if !line.is_empty() {
            self.line(&line, &mut out);
        }
        for slot in 0..2 {
            if let Some((time, text)) = self.partial[slot].take() {
                self.emit(Some(&time), &text, &mut out);
            }
        }
        out
    }
}
