//! A journal: the records of one store (keyed by id, values opaque) as one append-only file. A put or a
//! delete is an entry appended and fdatasynced; opening the file replays it, the last entry of a key
//! winning. When the file has grown to several times what is live, it is rewritten with the live entries
//! alone (a temporary file renamed over it, fsynced, file and directory).
//!
//! One file instead of a file per record: a pod's records cost no inode created and deleted on the root's
//! disk (on an ext4 without a journal, every new inode is searched for past the inodes deleted in the last
//! minutes, so per-record files made each pod start slower the more pods came and went before it).
//!
//! ```text
//!   file   = "crius-journal 1\n" entry*
//!   entry  = len: u32 LE   crc: u32 LE (crc32 of body)   body (len bytes)
//!   body   = op: u8 (1 put, 2 delete)   key len: u8   key   value (put only)
//! ```
//! A crash part-way through an append leaves a short or corrupt last entry, which the next open cuts off
//! (its call had not returned). Writers append one at a time and fdatasync outside the lock, so the
//! writes of concurrent calls share their flushes.

use std::collections::HashMap;
use std::fs::File;
use std::io::{Error, ErrorKind, Read, Result};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use super::{FILE_MODE, sync_dir};

const MAGIC: &[u8] = b"crius-journal 1\n";
const PUT: u8 = 1;
const DELETE: u8 = 2;
const HEADER: usize = 8;
/// A file is not rewritten below this size, whatever it holds.
const COMPACT_FLOOR: u64 = 256 * 1024;
/// It is rewritten once it is this many times the size of its live entries.
const COMPACT_RATIO: u64 = 4;

/// The journal of one store.
pub struct Journal {
    path: PathBuf,
    inner: Mutex<Inner>,
}

struct Inner {
    file: Arc<File>,
    /// The file's length: where the next entry goes.
    len: u64,
    /// Where each live key's last put is in the file (offset, length of the whole entry).
    live: HashMap<String, (u64, u64)>,
    live_bytes: u64,
}

fn entry(op: u8, key: &str, value: &[u8]) -> Result<Vec<u8>> {
    let k = key.as_bytes();
    if k.is_empty() || k.len() > u8::MAX as usize {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            format!("journal key {key:?}: 1 to 255 bytes"),
        ));
    }
    let mut body = Vec::with_capacity(2 + k.len() + value.len());
    body.push(op);
    body.push(k.len() as u8);
    body.extend_from_slice(k);
    body.extend_from_slice(value);
    let len = u32::try_from(body.len())
        .map_err(|_| Error::new(ErrorKind::InvalidInput, "journal entry over 4 GiB"))?;
    let mut e = Vec::with_capacity(HEADER + body.len());
    e.extend_from_slice(&len.to_le_bytes());
    e.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
    e.extend_from_slice(&body);
    Ok(e)
}

/// One entry parsed from `bytes` at its start: (op, key, value, whole length); None if it is short or
/// corrupt.
fn parse(bytes: &[u8]) -> Option<(u8, &str, &[u8], usize)> {
    let len = u32::from_le_bytes(bytes.get(0..4)?.try_into().ok()?) as usize;
    let crc = u32::from_le_bytes(bytes.get(4..8)?.try_into().ok()?);
    let body = bytes.get(HEADER..HEADER.checked_add(len)?)?;
    if crc32fast::hash(body) != crc || body.len() < 2 {
        return None;
    }
    let (op, klen) = (body[0], body[1] as usize);
    let key = std::str::from_utf8(body.get(2..2 + klen)?).ok()?;
    if key.is_empty() || !matches!(op, PUT | DELETE) {
        return None;
    }
    Some((op, key, &body[2 + klen..], HEADER + len))
}

/// What a journal's bytes hold: the live values and where each one's entry is, and where the last whole
/// entry ends.
struct Replay {
    values: HashMap<String, Vec<u8>>,
    live: HashMap<String, (u64, u64)>,
    end: usize,
}

fn replay(bytes: &[u8]) -> Replay {
    let mut r = Replay {
        values: HashMap::new(),
        live: HashMap::new(),
        end: MAGIC.len(),
    };
    while r.end < bytes.len() {
        let Some((op, key, value, n)) = parse(&bytes[r.end..]) else {
            break;
        };
        if op == PUT {
            r.values.insert(key.to_string(), value.to_vec());
            r.live.insert(key.to_string(), (r.end as u64, n as u64));
        } else {
            r.values.remove(key);
            r.live.remove(key);
        }
        r.end += n;
    }
    r
}

/// The keys the journal at `path` holds, read without changing it (another process may be writing it: a
/// half-written last entry is left out); none if there is no journal there.
pub fn keys(path: &Path) -> Result<Vec<String>> {
    let bytes = match std::fs::read(path) {
        Ok(b) if MAGIC.starts_with(&b) => return Ok(Vec::new()),
        Ok(b) => b,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    if !bytes.starts_with(MAGIC) {
        return Err(Error::new(
            ErrorKind::InvalidData,
            format!("{} is not a crius journal", path.display()),
        ));
    }
    Ok(replay(&bytes).live.into_keys().collect())
}

fn create(path: &Path, contents: &[u8]) -> Result<File> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .mode(FILE_MODE)
        .open(path)?;
    f.write_all_at(contents, 0)?;
    f.sync_all()?;
    Ok(f)
}

impl Journal {
    /// Opens (or makes) the journal at `path` and returns it with the live values, by key. A short or
    /// corrupt last entry (a crash part-way through an append) is cut off and logged; a file that is not
    /// a journal is an error, and is left alone.
    pub fn open(path: &Path) -> Result<(Journal, HashMap<String, Vec<u8>>)> {
        let dir = path.parent().unwrap_or(Path::new("."));
        let tmp = path.with_extension("tmp");
        if tmp.exists() {
            // A rewrite cut short: the journal itself is the old one, whole.
            tracing::info!(path = %tmp.display(), "repaired: removed a journal rewrite a crash cut short");
            std::fs::remove_file(&tmp)?;
        }
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(FILE_MODE)
            .open(path)?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        if bytes.len() < MAGIC.len() && MAGIC.starts_with(&bytes) {
            // New, or cut short while it was first made (empty, or part of its header).
            file.set_len(0)?;
            file.write_all_at(MAGIC, 0)?;
            file.sync_all()?;
            sync_dir(dir)?;
            bytes = Vec::from(MAGIC);
        }
        if !bytes.starts_with(MAGIC) {
            return Err(Error::new(
                ErrorKind::InvalidData,
                format!("{} is not a crius journal", path.display()),
            ));
        }
        let Replay {
            values,
            live,
            end: at,
        } = replay(&bytes);
        if at < bytes.len() {
            tracing::info!(path = %path.display(), cut = bytes.len() - at,
                "repaired: cut off the journal's last entry, which a crash left half-written");
            file.set_len(at as u64)?;
            file.sync_all()?;
        }
        let live_bytes = live.values().map(|(_, n)| n).sum();
        let journal = Journal {
            path: path.to_path_buf(),
            inner: Mutex::new(Inner {
                file: Arc::new(file),
                len: at as u64,
                live,
                live_bytes,
            }),
        };
        Ok((journal, values))
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records `value` as `key`'s; returns once it is on disk.
    pub fn put(&self, key: &str, value: &[u8]) -> Result<()> {
        self.append(PUT, key, value)
    }

    /// Forgets `key` (a key it does not hold is fine: nothing is written); returns once that is on disk.
    pub fn delete(&self, key: &str) -> Result<()> {
        self.append(DELETE, key, &[])
    }

    fn append(&self, op: u8, key: &str, value: &[u8]) -> Result<()> {
        let e = entry(op, key, value)?;
        let file = {
            let mut g = self.lock();
            if op == DELETE && !g.live.contains_key(key) {
                return Ok(());
            }
            let at = g.len;
            if let Err(err) = g.file.write_all_at(&e, at) {
                // Whatever part of it reached the file goes, so the next entry follows the last whole one.
                let _ = g.file.set_len(at);
                return Err(err);
            }
            let n = e.len() as u64;
            g.len += n;
            if let Some((_, old)) = g.live.remove(key) {
                g.live_bytes -= old;
            }
            if op == PUT {
                g.live.insert(key.to_string(), (at, n));
                g.live_bytes += n;
            }
            if g.len > COMPACT_FLOOR && g.len > COMPACT_RATIO * g.live_bytes {
                // The rewrite is synced whole, this entry with it.
                return self.compact(&mut g);
            }
            g.file.clone()
        };
        file.sync_data()
    }

    /// Rewrites the file with its live entries alone.
    fn compact(&self, g: &mut Inner) -> Result<()> {
        let mut out = Vec::with_capacity(MAGIC.len() + g.live_bytes as usize);
        out.extend_from_slice(MAGIC);
        let mut moved = HashMap::with_capacity(g.live.len());
        for (key, &(at, n)) in &g.live {
            let start = out.len();
            out.resize(start + n as usize, 0);
            g.file.read_exact_at(&mut out[start..], at)?;
            moved.insert(key.clone(), (start as u64, n));
        }
        let tmp = self.path.with_extension("tmp");
        let file = create(&tmp, &out)?;
        std::fs::rename(&tmp, &self.path)?;
        sync_dir(self.path.parent().unwrap_or(Path::new(".")))?;
        tracing::debug!(path = %self.path.display(), from = g.len, to = out.len(), "journal rewritten");
        g.file = Arc::new(file);
        g.len = out.len() as u64;
        g.live = moved;
        Ok(())
    }

    /// The file's length (for tests).
    #[cfg(test)]
    fn len(&self) -> u64 {
        self.lock().len
    }
}

#[cfg(test)]
mod fuzz;
#[cfg(test)]
mod tests;
