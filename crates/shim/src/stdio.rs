//! A process's stdio. The shim holds pipes between the container and the outside:
//! - FIFOs, as containerd passes them (`stdin`/`stdout`/`stderr` paths): copied both ways by the shim, so the
//!   container never blocks on a reader that went away;
//! - the CRI log mode: stdout `crius-log:///path/to/file.log` makes the shim write the kubelet's log format
//!   itself, both streams into that file: `<RFC3339Nano> <stdout|stderr> <P|F> <text>`, one line per line of
//!   output, with lines longer than 16 KiB, and a line still unfinished at the end of a read (a prompt,
//!   `echo -n`), written as `P` (partial) records ended by an `F` record. The file is reopened (after kubelet rotated it) on an Update whose annotations hold `io.crius.log.reopen`.
//!   criusd writes it `crius-log://<log_directory>//<log_path>`: the file is opened beneath the log directory
//!   without following a symlink on the way (`crate::beneath`), so one planted there writes nothing elsewhere.

use std::ffi::OsStr;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use crate::error::{Error, Result};
use crate::pump::{self, Sink, Slot};
use crate::reactor::Reactor;
use crate::runtime::ChildIo;

/// The prefix of a stdout path that asks for the CRI log mode.
pub const CRI_LOG_SCHEME: &str = "crius-log://";
/// The prefix of a stdout path that asks for a capped CRI log: the output of a container that has no log file
/// of its own, kept only so that attach can follow it. Past [`CAPPED_LOG_MAX`] bytes it starts again empty.
pub const CAPPED_LOG_SCHEME: &str = "crius-attach-log://";
/// The size a capped log starts again at.
pub const CAPPED_LOG_MAX: u64 = 1 << 20;
/// The stdout path (stderr empty) that keeps both streams in memory, for ExecSync (`crate::capture`).
pub(crate) const CAPTURE: &str = "crius-capture:";
/// Update annotation that reopens a CRI log file.
pub const REOPEN_ANNOTATION: &str = "io.crius.log.reopen";
/// Longest log record; longer lines become partial records.
pub(crate) const MAX_LINE: usize = 16 * 1024;

/// A CRI log file shared by a process's two streams.
pub(crate) struct CriLog {
    path: PathBuf,
    file: Mutex<File>,
    /// Start again empty past this size (a capped log).
    cap: Option<u64>,
}

/// Opens (appending, creating it 0640) the log `path` names: `DIR//REL` is REL beneath DIR, REL's
/// directories made and no symlink in REL followed (see [`crate::beneath`]); a path without `//` is its file
/// name beneath its parent (made when missing), the file itself not followed if a symlink.
fn open_log(path: &Path) -> Result<File> {
    let raw = path.as_os_str().as_bytes();
    let (base, rel) = match raw.windows(2).rposition(|w| w == b"//") {
        Some(at) => (
            Path::new(OsStr::from_bytes(&raw[..at.max(1)])),
            Path::new(OsStr::from_bytes(&raw[at + 2..])),
        ),
        None => {
            let dir = path
                .parent()
                .filter(|d| !d.as_os_str().is_empty())
                .unwrap_or(Path::new("."));
            std::fs::create_dir_all(dir).map_err(Error::io(format!("creating {}", dir.display())))?;
            (dir, Path::new(path.file_name().unwrap_or_default()))
        }
    };
    crate::beneath::open_append(base, rel, 0o640)
        .map_err(Error::io(format!("opening log {}", path.display())))
}

impl CriLog {
    /// Opens (appending) the log at `path`.
    pub(crate) fn open(path: &Path) -> Result<Arc<CriLog>> {
        Ok(Arc::new(CriLog {
            path: path.to_path_buf(),
            file: Mutex::new(open_log(path)?),
            cap: None,
        }))
    }

    /// Opens the log a stdout path names: `crius-log://PATH` or `crius-attach-log://PATH` (capped); None for
    /// another path (a FIFO).
    pub(crate) fn from_stdout(stdout: &str) -> Option<Result<Arc<CriLog>>> {
        if let Some(p) = stdout.strip_prefix(CRI_LOG_SCHEME) {
            return Some(CriLog::open(Path::new(p)));
        }
        let p = stdout.strip_prefix(CAPPED_LOG_SCHEME)?;
        Some(open_log(Path::new(p)).map(|f| {
            Arc::new(CriLog {
                path: p.into(),
                file: Mutex::new(f),
                cap: Some(CAPPED_LOG_MAX),
            })
        }))
    }

    /// Reopens the file at its path (kubelet renamed the old one).
    pub(crate) fn reopen(&self) -> Result<()> {
        let f = open_log(&self.path)?;
        *self.file.lock().unwrap_or_else(|p| p.into_inner()) = f;
        Ok(())
    }

    fn write_record(&self, stream: &str, partial: bool, text: &[u8]) {
        let mut rec = Vec::with_capacity(text.len() + 48);
        rec.extend_from_slice(rfc3339_nano(SystemTime::now()).as_bytes());
        rec.push(b' ');
        rec.extend_from_slice(stream.as_bytes());
        rec.extend_from_slice(if partial { b" P " } else { b" F " });
        rec.extend_from_slice(text);
        rec.push(b'\n');
        // One write per record, under the lock: the two streams never interleave inside a record.
        let f = self.file.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(cap) = self.cap
            && f.metadata().is_ok_and(|m| m.len() > cap)
        {
            let _ = f.set_len(0);
        }
        let _ = (&*f).write_all(&rec);
    }
}

/// Formats `t` as Go's RFC3339Nano in UTC: trailing zeros of the fraction dropped, `Z` for the zone.
pub(crate) fn rfc3339_nano(t: SystemTime) -> String {
    crius_common::time::format(t, crius_common::time::Fraction::Trimmed)
}

/// Splits a stream into CRI log records: a record per line, and `P` records for every 16 KiB of a longer one.
#[derive(Default)]
pub(crate) struct Lines {
    line: Vec<u8>,
    /// A partial record of the current line was written: the line still owes its full record.
    open: bool,
}

impl Lines {
    /// Writes the records that `data` completes.
    pub(crate) fn feed(&mut self, data: &[u8], log: &CriLog, stream: &str) {
        for &b in data {
            if b == b'\n' {
                log.write_record(stream, false, &self.line);
                self.line.clear();
                self.open = false;
            } else {
                self.line.push(b);
                if self.line.len() == MAX_LINE {
                    log.write_record(stream, true, &self.line);
                    self.line.clear();
                    self.open = true;
                }
            }
        }
    }

    /// Writes the unfinished line, if any, as a partial record.
    pub(crate) fn flush_partial(&mut self, log: &CriLog, stream: &str) {
        if !self.line.is_empty() {
            log.write_record(stream, true, &self.line);
            self.line.clear();
            self.open = true;
        }
    }

    /// The stream ended: an unfinished line is written as a full record (an empty one after its partial
    /// records), so that every line ends with an `F` record.
    pub(crate) fn finish(&mut self, log: &CriLog, stream: &str) {
        if !self.line.is_empty() || self.open {
            log.write_record(stream, false, &self.line);
            self.line.clear();
            self.open = false;
        }
    }
}

/// Where a process's output goes, and what the shim keeps of its stdio.
#[derive(Default)]
pub(crate) struct ProcessIo {
    /// The write end of the container's stdin pipe (CloseIO drops it).
    pub(crate) stdin: Slot,
    /// The pty master, for a process with a terminal.
    pub(crate) console: Option<Arc<File>>,
    /// The CRI log, in log mode.
    pub(crate) log: Option<Arc<CriLog>>,
    /// stdout path as given.
    pub(crate) stdout_path: String,
    /// stderr path as given.
    pub(crate) stderr_path: String,
    /// stdin path as given.
    pub(crate) stdin_path: String,
    /// The stdin FIFO is held open (a container's init): its EOF comes only from CloseIO.
    pub(crate) hold_stdin: bool,
    /// The output kept in memory, for ExecSync (stdout [`CAPTURE`]).
    pub(crate) captured: Option<Arc<crate::capture::Captured>>,
}

fn pipe() -> Result<(File, File)> {
    let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(Error::sys("pipe"))?;
    Ok((File::from(r), File::from(w)))
}

/// Opens a FIFO for writing without blocking on a missing reader (then falls back to read-write, which keeps
/// it open for a reader that comes later).
fn open_fifo_write(path: &str) -> Result<File> {
    OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .or_else(|_| {
            OpenOptions::new()
                .read(true)
                .write(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(path)
        })
        .map_err(Error::io(format!("opening {path}")))
}

/// Opens a FIFO for reading; `hold` opens it read-write, so that the FIFO never reads EOF when a writer
/// leaves (a container's stdin outlives each attach; CloseIO ends it).
fn open_fifo_read(path: &str, hold: bool) -> Result<File> {
    OpenOptions::new()
        .read(true)
        .write(hold)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(Error::io(format!("opening {path}")))
}

fn slot(f: File) -> Slot {
    Arc::new(Mutex::new(Some(f)))
}

/// What the shim keeps of a process with a terminal, before the runtime sent its master.
pub(crate) fn terminal_paths(stdin: &str, stdout: &str, stderr: &str) -> ProcessIo {
    ProcessIo {
        stdin_path: stdin.into(),
        stdout_path: stdout.into(),
        stderr_path: stderr.into(),
        ..Default::default()
    }
}

/// Connects a terminal's `master` to the process's stdout (FIFO or CRI log) and stdin FIFO.
pub(crate) fn attach_terminal(reactor: &Reactor, io: &mut ProcessIo, master: File) -> Result<()> {
    let dup = |m: &File| m.try_clone().map_err(Error::io("terminal"));
    if let Some(log) = CriLog::from_stdout(&io.stdout_path) {
        let log = log?;
        io.log = Some(log.clone());
        pump::start(reactor, dup(&master)?, Sink::Log(log, "stdout"))?;
    } else if !io.stdout_path.is_empty() {
        let fifo = open_fifo_write(&io.stdout_path)?;
        pump::start(reactor, dup(&master)?, Sink::Fd(slot(fifo)))?;
    }
    if !io.stdin_path.is_empty() {
        let fifo = open_fifo_read(&io.stdin_path, io.hold_stdin)?;
        pump::start(reactor, fifo, Sink::Fd(slot(dup(&master)?)))?;
    }
    io.console = Some(Arc::new(master));
    Ok(())
}

/// Sets up a process's stdio from the paths containerd passed, pumped in `reactor`; returns the ends for the
/// runtime command and what the shim keeps.
pub(crate) fn setup(
    reactor: &Reactor,
    stdin: &str,
    stdout: &str,
    stderr: &str,
    hold_stdin: bool,
) -> Result<(ChildIo, ProcessIo)> {
    let mut child = ChildIo::default();
    let mut io = ProcessIo {
        hold_stdin,
        stdin_path: stdin.into(),
        stdout_path: stdout.into(),
        stderr_path: stderr.into(),
        ..Default::default()
    };
    if let Some(log) = CriLog::from_stdout(stdout) {
        let log = log?;
        for (stream, end) in [("stdout", &mut child.stdout), ("stderr", &mut child.stderr)] {
            let (r, w) = pipe()?;
            *end = Some(OwnedFd::from(w));
            pump::start(reactor, r, Sink::Log(log.clone(), stream))?;
        }
        io.log = Some(log);
    } else if stdout == CAPTURE {
        let captured = crate::capture::Captured::new();
        for (stream, end) in [
            (crate::capture::STDOUT, &mut child.stdout),
            (crate::capture::STDERR, &mut child.stderr),
        ] {
            let (r, w) = pipe()?;
            *end = Some(OwnedFd::from(w));
            pump::start(reactor, r, Sink::Memory(captured.clone(), stream))?;
        }
        io.captured = Some(captured);
    } else {
        for (path, end) in [(stdout, &mut child.stdout), (stderr, &mut child.stderr)] {
            if path.is_empty() {
                continue;
            }
            let fifo = open_fifo_write(path)?;
            let (r, w) = pipe()?;
            *end = Some(OwnedFd::from(w));
            pump::start(reactor, r, Sink::Fd(slot(fifo)))?;
        }
    }
    if !stdin.is_empty() {
        let fifo = open_fifo_read(stdin, hold_stdin)?;
        let (r, w) = pipe()?;
        child.stdin = Some(OwnedFd::from(r));
        io.stdin = slot(w);
        pump::start(reactor, fifo, Sink::Fd(io.stdin.clone()))?;
    }
    Ok((child, io))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn copy_to_log(data: &[u8], log: &CriLog, stream: &str) {
        let mut lines = Lines::default();
        // In two pieces, as reads come.
        let half = data.len() / 2;
        lines.feed(&data[..half], log, stream);
        lines.feed(&data[half..], log, stream);
        lines.finish(log, stream);
    }

    #[test]
    fn a_capped_log_starts_again_past_its_cap() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("attach.log");
        let stdout = format!("{CAPPED_LOG_SCHEME}{}", path.display());
        let log = CriLog::from_stdout(&stdout).unwrap().unwrap();
        let line = vec![b'x'; 1000];
        for _ in 0..3000 {
            log.write_record("stdout", false, &line);
            assert!(std::fs::metadata(&path).unwrap().len() <= CAPPED_LOG_MAX + 1100);
        }
        assert!(
            std::fs::read_to_string(&path)
                .unwrap()
                .ends_with(" stdout F xxx\n".replace("xxx", &"x".repeat(1000)).as_str())
        );
        assert!(CriLog::from_stdout("/some/fifo").is_none());
    }

    #[test]
    fn timestamps_are_go_rfc3339nano() {
        let t = SystemTime::UNIX_EPOCH + Duration::new(1_795_984_791, 237_209_000);
        assert_eq!(rfc3339_nano(t), "2026-11-29T20:39:51.237209Z");
        assert_eq!(rfc3339_nano(SystemTime::UNIX_EPOCH), "1970-01-01T00:00:00Z");
        let leap = SystemTime::UNIX_EPOCH + Duration::new(951_782_400, 5);
        assert_eq!(rfc3339_nano(leap), "2000-02-29T00:00:00.000000005Z");
    }

    #[test]
    fn log_records_split_long_lines_and_keep_the_last_partial_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/0.log");
        let log = CriLog::open(&path).unwrap();
        let mut input = b"hello\n\nworld".to_vec();
        input.extend(std::iter::repeat_n(b'x', MAX_LINE + 5));
        input.push(b'\n');
        copy_to_log(&input[..], &log, "stderr");
        let text = std::fs::read_to_string(&path).unwrap();
        let recs: Vec<(&str, &str, &str)> = text
            .lines()
            .map(|l| {
                let mut p = l.splitn(4, ' ');
                let ts = p.next().unwrap();
                assert!(ts.ends_with('Z') && ts.contains('T'), "{ts}");
                (p.next().unwrap(), p.next().unwrap(), p.next().unwrap_or(""))
            })
            .collect();
        assert_eq!(recs.len(), 4, "{text}");
        assert_eq!(recs[0], ("stderr", "F", "hello"));
        assert_eq!(recs[1], ("stderr", "F", ""));
        assert_eq!((recs[2].1, recs[2].2.len()), ("P", MAX_LINE));
        assert!(recs[2].2.starts_with("worldxxx"));
        assert_eq!((recs[3].1, recs[3].2.len()), ("F", 10));
        // Reopen after a rotation writes to a new file at the same path.
        std::fs::rename(&path, dir.path().join("sub/0.log.1")).unwrap();
        log.reopen().unwrap();
        copy_to_log(&b"after\n"[..], &log, "stdout");
        assert!(
            std::fs::read_to_string(&path)
                .unwrap()
                .ends_with(" stdout F after\n")
        );
    }
}
