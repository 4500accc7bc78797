//! `crius images import`: the CLI reads the archive (a file, an OCI layout directory, or stdin) with the
//! caller's own rights and streams it to criusd in the Import call's messages; criusd opens no path a client
//! names. A directory is sent as a tar made on the fly (symlinks as symlinks, never followed), so nothing is
//! spooled to disk or held in memory but a few chunks.

use std::fs::File;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};

use crius_api::images as api;
use tokio::sync::mpsc;

/// The bytes of one message: 1 MiB, well under gRPC's default 4 MiB message cap.
const CHUNK: usize = 1 << 20;

/// What the CLI reads the archive from.
enum Source {
    Stdin,
    File(File),
    Dir(PathBuf),
}

impl Source {
    /// Opens `path` (`-`: stdin) now, as the caller, so an unreadable or missing one fails before the call.
    fn open(path: &Path) -> Result<(Source, String), String> {
        if path.as_os_str() == "-" {
            return Ok((Source::Stdin, "stdin".into()));
        }
        let shown = std::path::absolute(path)
            .unwrap_or_else(|_| path.to_path_buf())
            .display()
            .to_string();
        let meta = std::fs::metadata(path).map_err(|e| format!("{shown}: {e}"))?;
        if meta.is_dir() {
            // Readable, as the caller: an error names the file at fault.
            std::fs::read_dir(path).map_err(|e| format!("{shown}: {e}"))?;
            return Ok((Source::Dir(path.to_path_buf()), shown));
        }
        let f = File::open(path).map_err(|e| format!("{shown}: {e}"))?;
        Ok((Source::File(f), shown))
    }
}

/// Writes what it is given as Import messages of [`CHUNK`] bytes; the first one names the archive.
struct Messages {
    tx: mpsc::Sender<api::ImportRequest>,
    buf: Vec<u8>,
    name: Option<String>,
    sent: u64,
}

impl Messages {
    fn send(&mut self) -> std::io::Result<()> {
        let data = std::mem::replace(&mut self.buf, Vec::with_capacity(CHUNK));
        self.sent += data.len() as u64;
        let name = self.name.take().unwrap_or_default();
        self.tx
            .blocking_send(api::ImportRequest { data, name })
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::BrokenPipe, "criusd stopped reading"))
    }
}

impl Write for Messages {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        let n = b.len().min(CHUNK - self.buf.len());
        self.buf.extend_from_slice(&b[..n]);
        if self.buf.len() == CHUNK {
            self.send()?;
        }
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Reads `source` into messages on `tx`, to its end.
fn produce(source: Source, tx: mpsc::Sender<api::ImportRequest>, name: String) -> Result<(), String> {
    let mut out = Messages {
        tx,
        buf: Vec::with_capacity(CHUNK),
        name: Some(name),
        sent: 0,
    };
    match source {
        Source::Stdin => {
            let mut stdin = std::io::BufReader::with_capacity(CHUNK, std::io::stdin().lock());
            let empty = stdin
                .fill_buf()
                .map_err(|e| format!("reading the archive from stdin: {e}"))?
                .is_empty();
            if empty {
                return Err(
                    "import -: stdin is empty (pipe an OCI archive or a docker-archive to it)".into(),
                );
            }
            std::io::copy(&mut stdin, &mut out).map_err(|e| format!("reading stdin: {e}"))?;
        }
        Source::File(mut f) => {
            std::io::copy(&mut f, &mut out).map_err(|e| format!("reading the archive: {e}"))?;
        }
        Source::Dir(dir) => {
            let mut b = tar::Builder::new(&mut out);
            b.follow_symlinks(false);
            b.mode(tar::HeaderMode::Deterministic);
            b.append_dir_all(".", &dir)
                .and_then(|_| b.finish())
                .map_err(|e| format!("reading {}: {e}", dir.display()))?;
        }
    }
    if !out.buf.is_empty() || out.sent == 0 {
        out.send().map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Streams the archive at `path` (`-`: stdin) to criusd's Import; its answer. A read that fails midway
/// cancels the call, so criusd never takes a cut-short archive for a whole one.
pub async fn import(
    channel: tonic::transport::Channel,
    path: &Path,
) -> Result<(api::ImportResponse, String), String> {
    let (source, shown) = Source::open(path)?;
    let (tx, rx) = mpsc::channel::<api::ImportRequest>(4);
    let name = shown.clone();
    let mut producer = tokio::task::spawn_blocking(move || produce(source, tx, name));
    let requests = futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|m| (m, rx)) });
    let mut client = api::images_client::ImagesClient::new(channel);
    let call = client.import(requests);
    tokio::pin!(call);
    let answer = tokio::select! {
        answer = &mut call => answer,
        produced = &mut producer => match produced.map_err(|e| e.to_string()).and_then(|r| r) {
            // Read to the end: criusd's answer follows.
            Ok(()) => call.await,
            // Dropping the call cancels it.
            Err(e) => return Err(format!("importing {shown}: {e}")),
        },
    };
    let resp = answer.map_err(|e| format!("importing {shown}: {:?}: {}", e.code(), e.message()))?;
    Ok((resp.into_inner(), shown))
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;

    #[test]
    fn a_directory_goes_as_a_tar_of_its_files_with_symlinks_kept() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("blobs")).unwrap();
        std::fs::write(dir.path().join("index.json"), b"{}").unwrap();
        std::os::unix::fs::symlink("/etc/shadow", dir.path().join("blobs/link")).unwrap();
        let (tx, mut rx) = mpsc::channel(64);
        let src = Source::Dir(dir.path().to_path_buf());
        let t = std::thread::spawn(move || produce(src, tx, "layout".into()));
        let mut bytes = Vec::new();
        let mut names = Vec::new();
        while let Some(m) = rx.blocking_recv() {
            names.push(m.name);
            bytes.extend(m.data);
        }
        t.join().unwrap().unwrap();
        assert_eq!(names[0], "layout");
        let mut a = tar::Archive::new(&bytes[..]);
        let mut seen = Vec::new();
        for e in a.entries().unwrap() {
            let mut e = e.unwrap();
            let kind = e.header().entry_type();
            let mut body = Vec::new();
            e.read_to_end(&mut body).unwrap();
            let p = e.path().unwrap().display().to_string();
            seen.push((p.trim_start_matches("./").to_string(), kind, body));
        }
        assert!(
            seen.iter().any(|(p, _, b)| p == "index.json" && b == b"{}"),
            "{seen:?}"
        );
        assert!(
            seen.iter()
                .any(|(p, k, b)| p == "blobs/link" && *k == tar::EntryType::Symlink && b.is_empty()),
            "{seen:?}"
        );
    }
}
