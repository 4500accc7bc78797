//! What criusd keeps of its sandboxes and containers: the records in memory and in a journal on disk per
//! kind ([`journal`]) behind one store shape ([`table::Table`]), and the names they reserve
//! ([`names::NameIndex`]). Shared here: a record's encoding
//! in its journal, writing a file whole (`crius_common::durable`), finding a record by its id or a unique
//! prefix of it, times as nanoseconds since the epoch (the CRI's unit), and new ids.
//!
//! A container's state is derived from its record, never asked of its shim (containerd's `status.go` does the
//! same); the record is kept current by the lifecycle calls and by the shim's events:
//!
//! ```text
//!   CreateContainer ──> CREATED ──StartContainer──> RUNNING ──exit event / Stop──> EXITED ──Remove──> (gone)
//!                          │                           │                              ^
//!                          └────────── the pod's shim dies, no exit known ──> UNKNOWN ─┘ (an exit event, late)
//! ```
//! An exit, once known, wins over everything else: `finished_at` set means EXITED.

use std::collections::HashMap;
use std::path::Path;

pub mod container;
pub mod intents;
pub mod journal;
pub mod locks;
pub mod names;
pub mod sandbox;
pub mod table;

pub(crate) use crius_common::durable::{sync_dir, write as write_atomic};

/// criusd's directories under its root and state are its own user's alone ([`DIR_MODE`]), and so are the files
/// it keeps there ([`FILE_MODE`]: records, intents, config.json); `write_private` writes one, `private_dir` makes
/// (or tightens) one: crius_common's private files, as the runtime and the shim keep theirs.
pub use crius_common::private::{
    DIR_MODE, FILE_MODE, dir_all_tightened as private_dir, write as write_private,
};

/// The name of a store's journal in its directory.
pub const JOURNAL: &str = "journal";

/// A record as its journal holds it: the record's JSON (its length first, 4 bytes little-endian), then the
/// CRI config as sent, in protobuf.
pub(crate) fn encode<R: serde::Serialize, C: prost::Message>(
    record: &R,
    config: &C,
) -> std::io::Result<Vec<u8>> {
    let json = serde_json::to_vec(record).map_err(std::io::Error::other)?;
    let len = u32::try_from(json.len()).map_err(std::io::Error::other)?;
    let mut v = Vec::with_capacity(4 + json.len() + config.encoded_len());
    v.extend_from_slice(&len.to_le_bytes());
    v.extend_from_slice(&json);
    config.encode(&mut v).map_err(std::io::Error::other)?;
    Ok(v)
}

/// The record and config [`encode`] made `v` of.
pub(crate) fn decode<R: serde::de::DeserializeOwned, C: prost::Message + Default>(
    v: &[u8],
) -> Result<(R, C), String> {
    let len = v
        .get(..4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
        .ok_or("a record shorter than its header")?;
    let json = v.get(4..4 + len).ok_or("a record shorter than its header says")?;
    let record = serde_json::from_slice(json).map_err(|e| e.to_string())?;
    let config = C::decode(&v[4 + len..]).map_err(|e| e.to_string())?;
    Ok((record, config))
}

/// Opens the records of one kind under `dir` (`kind` names them in the log): its journal, and the records
/// in it. Those an older criusd kept as a directory each (`<id>/<main>` and `config.pb`) move into the
/// journal; such a directory goes once its record has moved, unless it holds other files (a sandbox's
/// `hostname`, `hosts` and `resolv.conf`, which stay until the sandbox is removed), and one without `main`
/// is what a crash left of a record and goes whole. A record that cannot be read is skipped with a warning;
/// it is not deleted.
pub(crate) fn open_records<R, C>(
    dir: &Path,
    main: &str,
    kind: &str,
) -> std::io::Result<(journal::Journal, Vec<(R, C)>)>
where
    R: serde::Serialize + serde::de::DeserializeOwned,
    C: prost::Message + Default,
{
    private_dir(dir)?;
    let (journal, values) = journal::Journal::open(&dir.join(JOURNAL))?;
    let mut found = Vec::new();
    for (id, v) in &values {
        match decode(v) {
            Ok(rc) => found.push(rc),
            Err(err) => tracing::warn!(kind, id = %id, "skipping a record: {err}"),
        }
    }
    for e in std::fs::read_dir(dir)?.flatten().filter(|e| e.path().is_dir()) {
        let old = e.path();
        let id = e.file_name().to_string_lossy().into_owned();
        if !values.contains_key(&id) {
            if is_leftover(&old, main) {
                tracing::info!(kind, path = %old.display(), "repaired: removed what a crash left of a record");
                remove_record_dir(&old, main)?;
                continue;
            }
            match read_old::<R, C>(&old, main) {
                Ok((record, config)) => {
                    journal.put(&id, &encode(&record, &config)?)?;
                    tracing::info!(kind, id = %id, "moved an older criusd's record into the journal");
                    found.push((record, config));
                }
                Err(err) => {
                    tracing::warn!(kind, path = %old.display(), "skipping a record: {err}");
                    continue;
                }
            }
        }
        // Its record is in the journal (moved now, or by a start a crash cut short): the old files go.
        for f in [main, "config.pb"] {
            match std::fs::remove_file(old.join(f)) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
        let _ = std::fs::remove_dir(&old); // fails while it holds other files
    }
    Ok((journal, found))
}

/// A record as an older criusd kept it: directory `dir` holding `main` (the record's JSON) and `config.pb`.
fn read_old<R: serde::de::DeserializeOwned, C: prost::Message + Default>(
    dir: &Path,
    main: &str,
) -> Result<(R, C), String> {
    let rec = std::fs::read(dir.join(main)).map_err(|e| e.to_string())?;
    let record = serde_json::from_slice(&rec).map_err(|e| e.to_string())?;
    let pb = std::fs::read(dir.join("config.pb")).map_err(|e| e.to_string())?;
    let config = C::decode(&pb[..]).map_err(|e| e.to_string())?;
    Ok((record, config))
}

/// Removes a record's directory `dir` (as an older criusd kept records), its main file `main` first: a
/// crash part-way leaves a directory without its main file, which [`is_leftover`] tells from a record and
/// the next start removes.
fn remove_record_dir(dir: &Path, main: &str) -> std::io::Result<()> {
    let gone = |r: std::io::Result<()>| match r {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        r => r,
    };
    gone(std::fs::remove_file(dir.join(main)))?;
    gone(sync_dir(dir))?;
    gone(std::fs::remove_dir_all(dir))
}

/// Whether record directory `dir` (an older criusd's) is what a crash left of a record being written for
/// the first time or removed: it has no main file `main` (the first write makes it last, removal takes it first).
fn is_leftover(dir: &Path, main: &str) -> bool {
    dir.is_dir() && !dir.join(main).exists()
}

/// The entry whose key is `id`, else the only one whose key starts with it (crictl and kubelet take short
/// ids); none for an empty or ambiguous prefix.
pub(crate) fn by_id_or_prefix<'a, T>(all: &'a HashMap<String, T>, id: &str) -> Option<&'a T> {
    if let Some(v) = all.get(id) {
        return Some(v);
    }
    if id.is_empty() {
        return None;
    }
    let mut found = all.iter().filter(|(k, _)| k.starts_with(id)).map(|(_, v)| v);
    match (found.next(), found.next()) {
        (Some(v), None) => Some(v),
        _ => None,
    }
}

/// The names in directory `dir` (none if it cannot be read).
pub(crate) fn list_dir(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Now, in nanoseconds since the epoch.
pub(crate) fn now_ns() -> i64 {
    crius_common::time::now_ns()
}

/// A new sandbox or container id: 64 random hex digits.
pub(crate) fn random_id() -> std::io::Result<String> {
    crius_common::id::random_hex(32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_unique_prefixes_find_their_entry() {
        let all: HashMap<String, u8> = [("abc1".to_string(), 1), ("abd2".to_string(), 2)].into();
        assert_eq!(by_id_or_prefix(&all, "abd2"), Some(&2));
        assert_eq!(by_id_or_prefix(&all, "abc"), Some(&1));
        assert_eq!(by_id_or_prefix(&all, "ab"), None, "ambiguous");
        assert_eq!(by_id_or_prefix(&all, ""), None);
        assert_eq!(by_id_or_prefix(&all, "x"), None);
    }
}
