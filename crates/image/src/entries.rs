//! A tar (gzip, zstd or plain) read entry by entry behind the header [`gate`](crate::gate), for callers that
//! decide themselves what an entry may be and where it goes (criusd's checkpoint archives): an extension
//! header over [`MAX_EXTENSION`](crate::gate::MAX_EXTENSION), more header bytes than
//! [`HEADERS_BUDGET`](crate::gate::HEADERS_BUDGET) for one entry, or a name too long for PATH_MAX is
//! [`Error::LayerRefused`] before it is held. What an entry's data may amount to is the caller's cap: the tar
//! reader reads no more of an entry than its header's size.

use std::io::Read;
use std::rc::Rc;

use crate::error::io;
use crate::gate::{Gate, Shared};
use crate::unpack::{check_names, decompressed};
use crate::{Error, Result};

/// The reader an entry reads its data from.
pub type Source<'a> = Box<dyn Read + 'a>;

/// Calls `f` on each entry of the tar `what` (named in errors) read from `reader`, in order, until it returns
/// `Ok(false)` or an error (returned as it is). Whatever of an entry `f` leaves unread is skipped.
pub fn each_entry<'a>(
    reader: impl Read + 'a,
    what: &str,
    mut f: impl FnMut(&mut tar::Entry<'_, Source<'a>>) -> Result<bool>,
) -> Result<()> {
    let shared = Rc::new(Shared::default());
    let gated: Source<'a> = Box::new(Gate::new(decompressed(reader)?, shared.clone(), u64::MAX));
    let refused = |e: Error| match shared.refusal() {
        Some(why) => Error::LayerRefused {
            layer: what.to_string(),
            why,
        },
        None => e,
    };
    let mut archive = tar::Archive::new(gated);
    let mut entries = archive
        .entries()
        .map_err(|e| refused(io(format!("reading {what}"), e)))?;
    while let Some(entry) = shared.headers(|| entries.next()) {
        let mut entry = entry.map_err(|e| refused(io(format!("reading {what}"), e)))?;
        check_names(&entry, what)?;
        if !f(&mut entry)? {
            return Ok(());
        }
        std::io::copy(&mut entry, &mut std::io::sink())
            .map_err(|e| refused(io(format!("reading {what}"), e)))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tar_of(entries: &[(&str, &[u8])]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for (name, data) in entries {
            let mut h = tar::Header::new_gnu();
            h.set_size(data.len() as u64);
            h.set_mode(0o644);
            b.append_data(&mut h, name, *data).unwrap();
        }
        b.into_inner().unwrap()
    }

    #[test]
    fn entries_come_in_order_and_a_false_stops() {
        let tar = tar_of(&[("a", b"1"), ("b", b"22"), ("c", b"333")]);
        let mut seen = Vec::new();
        each_entry(&tar[..], "t", |e| {
            seen.push((e.path().unwrap().display().to_string(), e.size()));
            Ok(seen.len() < 2)
        })
        .unwrap();
        assert_eq!(seen, [("a".to_string(), 1), ("b".to_string(), 2)]);
    }

    #[test]
    fn a_huge_long_name_header_is_refused_before_it_is_read() {
        // A GNU long name header claiming 1 GiB: the tar crate would allocate it whole.
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::GNULongName);
        h.set_size(1 << 30);
        h.set_cksum();
        let mut tar = h.as_bytes().to_vec();
        tar.extend(vec![b'a'; 4096]);
        let e = each_entry(&tar[..], "archive x", |_| Ok(true)).unwrap_err();
        assert!(
            matches!(&e, Error::LayerRefused { layer, why } if layer == "archive x" && why.contains("GNU long name")),
            "{e}"
        );
    }
}
