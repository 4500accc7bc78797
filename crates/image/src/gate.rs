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
