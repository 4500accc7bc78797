//! Attach's output: the container's CRI log followed from its end, records turned back into the bytes of
//! their streams.

use std::path::PathBuf;
use std::time::Duration;

use tokio::io::AsyncWriteExt;

/// Follows the CRI log at `path` from its current end, writing each record's text to `out` or `err` by its
/// stream, until `stop` turns true and the file is read to its end (or the readers went away). A rotated
/// file (a new one at the path, or a shorter one) is followed from its start.
pub(super) async fn follow(
    path: PathBuf,
    mut out: Option<tokio::io::DuplexStream>,
    mut err: Option<tokio::io::DuplexStream>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    use std::io::{Read, Seek, SeekFrom};
    use std::os::unix::fs::MetadataExt;
    let open = |p: &PathBuf| match open_log(p) {
        Ok(f) => f,
        Err(e) => {
            tracing::warn!(path = %p.display(), "attach: not following the container's log: {e}");
            None
        }
    };
    let mut file = open(&path);
    let mut pos = file
        .as_ref()
        .and_then(|f| f.metadata().ok())
        .map(|m| m.len())
        .unwrap_or(0);
    let mut ino = file
        .as_ref()
        .and_then(|f| f.metadata().ok())
        .map(|m| m.ino())
        .unwrap_or(0);
    let mut pending: Vec<u8> = Vec::new();
    loop {
        let stopping = *stop.borrow();
        let mut read_any = false;
        if let Some(f) = file.as_mut() {
            let mut buf = vec![0u8; 64 * 1024];
            if f.seek(SeekFrom::Start(pos)).is_ok() {
                while let Ok(n) = f.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    pos += n as u64;
                    read_any = true;
                    pending.extend_from_slice(&buf[..n]);
                    while let Some(nl) = pending.iter().position(|b| *b == b'\n') {
                        let line: Vec<u8> = pending.drain(..=nl).collect();
                        if let Some((stream, text)) = record(&line[..line.len() - 1]) {
                            let sink = if stream == "stderr" { &mut err } else { &mut out };
                            if let Some(w) = sink.as_mut()
                                && w.write_all(&text).await.is_err()
                            {
                                *sink = None;
                            }
                        }
                    }
                    if out.is_none() && err.is_none() {
                        return;
                    }
                }
            }
        }
        if stopping && !read_any {
            return;
        }
        // Rotated: a new file at the path.
        if let Ok(m) = std::fs::symlink_metadata(&path)
            && (m.ino() != ino || m.len() < pos)
        {
            file = open(&path);
            ino = m.ino();
            pos = 0;
        }
        if !read_any {
            let _ = tokio::time::timeout(Duration::from_millis(50), stop.changed()).await;
        }
    }
}

/// Opens the CRI log at `path` to read, if it is there: a symlink planted in its place is not followed (nor
/// read as root), and the open does not wait (`O_NONBLOCK`) on a FIFO or device put there; anything but a
/// regular file is refused, so a container cannot park this task (an async worker) in open(2) or read(2).
fn open_log(path: &std::path::Path) -> std::io::Result<Option<std::fs::File>> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    if !f.metadata()?.file_type().is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a regular file (a FIFO, device or socket in the log's place is refused)",
        ));
    }
    Ok(Some(f))
}

/// The stream and text of one CRI log record (`<time> <stream> <P|F> <text>`, read by
/// [`crius_common::cri_log::parse`]): a full record's text ends with a newline, a partial one's does not.
fn record(line: &[u8]) -> Option<(&'static str, Vec<u8>)> {
    use crius_common::cri_log::{Stream, parse};
    let r = parse(line)?;
    let stream = match r.stream {
        Stream::Stdout => "stdout",
        Stream::Stderr => "stderr",
    };
    let mut text = r.text.to_vec();
    if !r.partial {
        text.push(b'\n');
    }
    Some((stream, text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fifo_or_device_in_the_logs_place_is_refused_without_blocking() {
        let d = tempfile::tempdir().unwrap();
        let fifo = d.path().join("0.log");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send((
                open_log(&fifo).map(|f| f.is_some()),
                open_log(std::path::Path::new("/dev/zero")).map(|f| f.is_some()),
            ));
        });
        let (fifo, dev) = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("open_log blocked on a FIFO");
        for e in [fifo.unwrap_err(), dev.unwrap_err()] {
            assert!(e.to_string().contains("not a regular file"), "{e}");
        }
        assert!(open_log(&d.path().join("missing")).unwrap().is_none());
    }

    #[test]
    fn log_records_give_their_stream_and_text() {
        assert_eq!(
            record(b"2026-01-01T00:00:00Z stdout F hello world"),
            Some(("stdout", b"hello world\n".to_vec()))
        );
        assert_eq!(
            record(b"2026-01-01T00:00:00Z stderr P $ "),
            Some(("stderr", b"$ ".to_vec()))
        );
        assert_eq!(
            record(b"2026-01-01T00:00:00Z stdout F"),
            Some(("stdout", b"\n".to_vec()))
        );
        assert_eq!(record(b"garbage"), None);
    }

    #[tokio::test]
    async fn following_a_log_gives_what_is_written_after_the_start() {
        use tokio::io::AsyncReadExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("0.log");
        std::fs::write(&path, "t stdout F before\n").unwrap();
        let (out_w, mut out_r) = tokio::io::duplex(1024);
        let (err_w, mut err_r) = tokio::io::duplex(1024);
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(follow(path.clone(), Some(out_w), Some(err_w), stopped));
        tokio::time::sleep(Duration::from_millis(100)).await;
        {
            use std::io::Write;
            let mut f = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
            f.write_all(b"t stdout P one \nt stdout F two\nt stderr F oops\n")
                .unwrap();
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
        let _ = stop.send(true);
        task.await.unwrap();
        let mut s = String::new();
        out_r.read_to_string(&mut s).await.unwrap();
        assert_eq!(s, "one two\n");
        let mut e = String::new();
        err_r.read_to_string(&mut e).await.unwrap();
        assert_eq!(e, "oops\n");
    }
}
