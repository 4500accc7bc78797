//! What one layer (or an archive given to import) may make criusd read and hold, enforced between its
//! decompressor and the tar reader.
//!
//! The tar crate reads a GNU long name (`L`), long link (`K`) or PAX (`x`) header's body whole into memory
//! before it yields the entry it describes, trusting the header's size field: 2 MB of gzip saying "a 2 GiB
//! long name" made criusd hold more than 2 GiB. `Gate` watches the stream the tar reader consumes: while
//! the reader is between entries (looking for the next header, see `Shared::headers`) it parses each header
//! block itself and refuses an extension header of more than [`MAX_EXTENSION`] bytes before its body is read,
//! and it caps what the reader may consume between two entries at all ([`HEADERS_BUDGET`], which also bounds
//! GNU sparse extension blocks). Entry data is read by the unpacker, outside those phases, and drained to its
//! end, so the next header is always at the next block boundary. Every byte also counts against
//! [`Limits::max_bytes`].

use std::cell::{Cell, RefCell};
use std::io::Read;
use std::rc::Rc;

/// The largest GNU long name, long link or PAX extension header body read: 64 KiB, far above any PATH_MAX
/// name and a few xattrs.
pub const MAX_EXTENSION: u64 = 64 << 10;

/// Entry and link names of this many bytes or more are refused: with its NUL, such a name does not fit
/// Linux's PATH_MAX.
pub const PATH_MAX: usize = 4096;

/// The most the tar reader may consume between two entries: up to three extension headers at their cap, the
/// header blocks, and GNU sparse extension blocks.
pub const HEADERS_BUDGET: u64 = 4 * MAX_EXTENSION;

const BLOCK: u64 = 512;

/// The caps on one layer, `[image]` keys of criusd's config.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The most bytes of uncompressed tar (`max_layer_bytes`).
    pub max_bytes: u64,
    /// The most entries (`max_layer_entries`).
    pub max_entries: u64,
}

impl Default for Limits {
    /// 64 GiB and 10 million entries: about three times the largest layers of real images (CUDA and ML
    /// framework layers of 10-20 GiB; a node_modules or source tree layer of a million files or two).
    fn default() -> Limits {
        Limits {
            max_bytes: 64 << 30,
            max_entries: 10_000_000,
        }
    }
}

/// State shared by the unpacker and the [`Gate`] it hands the tar reader.
#[derive(Debug, Default)]
pub(crate) struct Shared {
    /// True while the tar reader looks for the next entry.
    in_headers: Cell<bool>,
    /// Set when a new search for an entry starts.
    fresh: Cell<bool>,
    /// Why the stream was refused (the gate's io error only says "refused").
    refusal: RefCell<Option<String>>,
}

impl Shared {
    /// Runs `f` (the tar reader's `next()`) as a search for the next entry's headers.
    pub(crate) fn headers<T>(&self, f: impl FnOnce() -> T) -> T {
        self.in_headers.set(true);
        self.fresh.set(true);
        let out = f();
        self.in_headers.set(false);
        out
    }

    /// Why the gate refused the stream, if it did.
    pub(crate) fn refusal(&self) -> Option<String> {
        self.refusal.borrow().clone()
    }

    /// Records `why` as the refusal (the first one stays).
    pub(crate) fn refuse(&self, why: String) -> std::io::Error {
        let mut r = self.refusal.borrow_mut();
        if r.is_none() {
            *r = Some(why);
        }
        std::io::Error::other("refused by the layer's caps")
    }
}

/// The reader between a layer's decompressor and the tar reader (see the module doc).
pub(crate) struct Gate<R> {
    inner: R,
    shared: Rc<Shared>,
    max_bytes: u64,
    /// Bytes delivered so far.
    pos: u64,
    /// Bytes delivered in the current search for an entry.
    phase: u64,
    /// Where the next header block starts, when known.
    next_header: Option<u64>,
    /// The end-of-archive block was seen: nothing after it is parsed.
    ended: bool,
    block: [u8; BLOCK as usize],
    filled: usize,
}

impl<R: Read> Gate<R> {
    pub(crate) fn new(inner: R, shared: Rc<Shared>, max_bytes: u64) -> Gate<R> {
        Gate {
            inner,
            shared,
            max_bytes,
            pos: 0,
            phase: 0,
            next_header: Some(0),
            ended: false,
            block: [0; BLOCK as usize],
            filled: 0,
        }
    }

    /// Parses what of `bytes` (which end at `self.pos`) belongs to the header block expected.
    fn inspect(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        let mut start = self.pos - bytes.len() as u64;
        while let Some(h) = self.next_header.filter(|_| !self.ended) {
            let end = self.pos.min(h + BLOCK);
            let from = start.max(h + self.filled as u64);
            if from >= end {
                return Ok(());
            }
            let (a, b) = ((from - start) as usize, (end - start) as usize);
            let at = (from - h) as usize;
            self.block[at..at + (b - a)].copy_from_slice(&bytes[a..b]);
            self.filled = at + (b - a);
            if self.filled < BLOCK as usize {
                return Ok(());
            }
            self.filled = 0;
            start = end;
            self.header(h)?;
        }
        Ok(())
    }

    /// A whole header block at `h`: an extension header over its cap is refused; the next header's place is
    /// known after an extension header, and found again at the next search after an entry.
    fn header(&mut self, h: u64) -> std::io::Result<()> {
        if self.block.iter().all(|b| *b == 0) {
            self.ended = true;
            return Ok(());
        }
        let kind = match self.block[156] {
            b'L' => "GNU long name",
            b'K' => "GNU long link",
            b'x' => "PAX",
            b'g' => "PAX global",
            _ => {
                self.next_header = None;
                return Ok(());
            }
        };
        // A size the tar reader cannot parse is its error to give.
        let Ok(size) = tar::Header::from_byte_slice(&self.block).entry_size() else {
            self.next_header = None;
            return Ok(());
        };
        if size > MAX_EXTENSION {
            return Err(self.shared.refuse(format!(
                "a {kind} header of {size} bytes, more than the {MAX_EXTENSION} one may have"
            )));
        }
        self.next_header = Some(h + BLOCK + size.div_ceil(BLOCK) * BLOCK);
        Ok(())
    }
}

impl<R: Read> Read for Gate<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let headers = self.shared.in_headers.get();
        if headers && self.shared.fresh.replace(false) {
            self.phase = 0;
            self.filled = 0;
            if self.next_header.is_none() {
                self.next_header = Some(self.pos.div_ceil(BLOCK) * BLOCK);
            }
        }
        let n = self.inner.read(buf)?;
        self.pos += n as u64;
        if self.pos > self.max_bytes {
            return Err(self.shared.refuse(format!(
                "more than {} bytes of uncompressed tar, the cap ([image] max_layer_bytes)",
                self.max_bytes
            )));
        }
        if headers {
            self.phase += n as u64;
            if self.phase > HEADERS_BUDGET {
                return Err(self.shared.refuse(format!(
                    "more than {HEADERS_BUDGET} bytes of headers for one entry, the cap"
                )));
            }
            self.inspect(&buf[..n])?;
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    //! The caps at their bound and one past it: the default byte cap itself (through a reader that claims
    //! its bytes without writing them, so 64 GiB cost no memory and little time), and the entry cap with a
    //! small `max_entries` (ten million entries would be ten million files).

    use super::*;
    use crate::Error;
    use crate::unpack::unpack_layer;

    /// `left` bytes of a stream whose reads leave the buffer as it is: only the counts are real.
    struct Claims {
        left: u64,
    }

    impl Read for Claims {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = self.left.min(buf.len() as u64);
            self.left -= n;
            Ok(n as usize)
        }
    }

    /// Reads `len` bytes through a gate of the default caps, outside any header search: the error and the
    /// refusal's words, if refused.
    fn read_through(len: u64) -> Result<u64, (std::io::Error, Option<String>)> {
        let shared = Rc::new(Shared::default());
        let mut gate = Gate::new(Claims { left: len }, shared.clone(), Limits::default().max_bytes);
        let mut buf = vec![0; 1 << 20];
        let mut total = 0;
        loop {
            match gate.read(&mut buf) {
                Ok(0) => return Ok(total),
                Ok(n) => total += n as u64,
                Err(e) => return Err((e, shared.refusal())),
            }
        }
    }

    #[test]
    fn the_defaults_are_64_gib_and_ten_million_entries() {
        assert_eq!(
            Limits::default(),
            Limits {
                max_bytes: 64 * 1024 * 1024 * 1024,
                max_entries: 10_000_000,
            }
        );
    }

    #[test]
    fn a_stream_of_the_default_byte_cap_passes_and_one_byte_more_is_refused() {
        let cap = Limits::default().max_bytes;
        assert_eq!(read_through(cap).unwrap(), cap);
        let (e, why) = read_through(cap + 1).unwrap_err();
        assert_eq!(e.to_string(), "refused by the layer's caps");
        assert_eq!(
            why.as_deref(),
            Some("more than 68719476736 bytes of uncompressed tar, the cap ([image] max_layer_bytes)")
        );
    }

    /// A tar of `n` empty files.
    fn files(n: usize) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for i in 0..n {
            let mut h = tar::Header::new_gnu();
            h.set_size(0);
            h.set_mode(0o644);
            b.append_data(&mut h, format!("f{i}"), &[][..]).unwrap();
        }
        b.into_inner().unwrap()
    }

    #[test]
    fn a_layer_of_as_many_entries_as_the_cap_unpacks_and_one_more_is_refused() {
        let limits = Limits {
            max_entries: 3,
            ..Limits::default()
        };
        let dir = tempfile::tempdir().unwrap();
        let at = dir.path().join("three");
        std::fs::create_dir(&at).unwrap();
        unpack_layer(&files(3)[..], &at, "layer sha256:three", &limits).unwrap();
        assert_eq!(std::fs::read_dir(&at).unwrap().count(), 3);

        let at = dir.path().join("four");
        std::fs::create_dir(&at).unwrap();
        let e = unpack_layer(&files(4)[..], &at, "layer sha256:four", &limits).unwrap_err();
        let Error::LayerRefused { layer, why } = &e else {
            panic!("not a refusal: {e}")
        };
        assert_eq!(layer, "layer sha256:four");
        assert_eq!(why, "more than 3 entries, the cap ([image] max_layer_entries)");
        // Refused at the fourth entry's header: the three before it are unpacked, the fourth is not.
        assert!(!at.join("f3").exists());
    }
}
