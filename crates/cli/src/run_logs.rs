//! `crius run --logs`: the containers' CRI log files, followed and printed on stdout as `<name> | <text>`
//! (partial records joined). Reads continue from where they stopped; the engine's events drain them first,
//! so a container's last lines come before the line saying it exited.

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

struct Follower {
    name: String,
    path: PathBuf,
    offset: u64,
    pending: Vec<u8>,
    partial: String,
}

/// The followed files.
#[derive(Clone, Default)]
pub struct Logs(Arc<Mutex<Vec<Follower>>>);

impl Logs {
    /// Follows `path`, the log of container `name`, from its start.
    pub fn add(&self, name: &str, path: PathBuf) {
        let mut all = self.0.lock().unwrap_or_else(|e| e.into_inner());
        all.push(Follower {
            name: name.into(),
            path,
            offset: 0,
            pending: Vec::new(),
            partial: String::new(),
        });
    }

    /// Prints what every file gained since the last call.
    pub fn drain(&self) {
        let mut all = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = std::io::stdout().lock();
        for f in all.iter_mut() {
            let Ok(mut file) = std::fs::File::open(&f.path) else {
                continue;
            };
            if file.seek(SeekFrom::Start(f.offset)).is_err() {
                continue;
            }
            let mut fresh = Vec::new();
            if file.read_to_end(&mut fresh).is_err() || fresh.is_empty() {
                continue;
            }
            f.offset += fresh.len() as u64;
            f.pending.extend_from_slice(&fresh);
            while let Some(nl) = f.pending.iter().position(|b| *b == b'\n') {
                let record: Vec<u8> = f.pending.drain(..=nl).collect();
                let record = &record[..record.len() - 1];
                // A line not in the CRI format is a line of text.
                let (partial, text) = match crius_pod::logs::parse(record) {
                    Some(r) => (r.partial, r.text),
                    None => (false, record),
                };
                f.partial.push_str(&String::from_utf8_lossy(text));
                if !partial {
                    let _ = writeln!(out, "{} | {}", f.name, f.partial);
                    f.partial.clear();
                }
            }
        }
        let _ = out.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_read_once_and_partials_joined() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("0.log");
        std::fs::write(&path, "t stdout P hel\n").unwrap();
        let logs = Logs::default();
        logs.add("c", path.clone());
        logs.drain();
        let f = |l: &Logs| {
            let all = l.0.lock().unwrap();
            (all[0].offset, all[0].partial.clone())
        };
        assert_eq!(f(&logs), (15, "hel".to_string()));
        let mut file = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
        file.write_all(b"t stdout F lo\n").unwrap();
        logs.drain();
        assert_eq!(f(&logs), (29, String::new()));
    }
}
