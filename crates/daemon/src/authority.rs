//! Any `:authority` on the unix socket. On a unix socket the authority names nothing, and clients fill it as
//! they like: grpcio 1.85 sends the socket path percent-encoded (`tmp%2Fcrius.sock`), which the `h2` crate under
//! tonic refuses as a malformed authority, resetting every stream. Go's gRPC server (and so containerd) takes
//! any authority. [`Lenient`] wraps each accepted connection and, on the bytes the client sends, rewrites an
//! `:authority` value that is not a valid URI authority into one of the same length (each byte outside
//! `[A-Za-z0-9.-]` becomes `-`), before `h2` reads it. Same length keeps the HPACK dynamic table the client's
//! encoder and `h2`'s decoder keep in step (an entry's size counts its value's length), so later references to
//! the entry see the rewritten value too.
//!
//! The rewrite walks HEADERS and CONTINUATION frames' header blocks (held until END_HEADERS) and decodes only
//! the HPACK representations' framing, never Huffman codes: a value sent Huffman-coded (grpc C-core sends
//! authority values as plain literals) or empty passes unchanged. Anything it cannot follow (a malformed block,
//! a header block over [`MAX_HELD`]) turns the rewrite off for the rest of the connection, leaving the bytes
//! as they came for `h2` to judge.

use std::collections::VecDeque;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

#[cfg(test)]
mod tests;

/// The client connection preface (RFC 9113 §3.4): 24 bytes before the first frame.
const PREFACE_LEN: usize = 24;
const FRAME_HEADER_LEN: usize = 9;
const HEADERS: u8 = 0x1;
const CONTINUATION: u8 = 0x9;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;
/// A header block larger than this is passed through unread (and the rewrite turned off).
pub const MAX_HELD: usize = 256 * 1024;
/// The static table's entries (RFC 7541 Appendix A); dynamic indices start after them.
const STATIC_ENTRIES: usize = 61;
/// The static table's index of `:authority`.
const STATIC_AUTHORITY: usize = 1;
/// Dynamic table entries kept: h2 advertises a 4096-byte table, and an entry takes at least 32 bytes.
const MAX_DYNAMIC: usize = 4096 / 32;

/// What the rewriter is in the middle of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// The preface's bytes still to pass.
    Preface(usize),
    /// Collecting a frame header (in `pending`).
    Header,
    /// A frame's payload bytes still to pass unchanged.
    Payload(usize),
    /// A header block frame's payload bytes still to hold; `end` when the frame ends the block.
    Held { left: usize, end: bool },
    /// Rewriting is off: everything passes.
    Off,
}

/// The connection's read-side rewriter: bytes in, the same bytes (with authorities fixed) out.
#[derive(Debug)]
pub struct Rewriter {
    state: State,
    /// A partial frame header.
    pending: Vec<u8>,
    /// The header block's frames (headers and payloads) held until END_HEADERS.
    held: Vec<u8>,
    /// Whether each dynamic table entry's name is `:authority`, newest first.
    dynamic: VecDeque<bool>,
    /// Authority values rewritten so far.
    rewritten: usize,
}

impl Default for Rewriter {
    fn default() -> Self {
        Rewriter {
            state: State::Preface(PREFACE_LEN),
            pending: Vec::new(),
            held: Vec::new(),
            dynamic: VecDeque::new(),
            rewritten: 0,
        }
    }
}

impl Rewriter {
    /// Authority values rewritten so far on this connection.
    pub fn rewritten(&self) -> usize {
        self.rewritten
    }

    /// Takes `data` from the client and appends what `h2` should read to `out`.
    pub fn feed(&mut self, mut data: &[u8], out: &mut Vec<u8>) {
        while !data.is_empty() {
            match self.state {
                State::Off => {
                    out.extend_from_slice(data);
                    return;
                }
                State::Preface(left) | State::Payload(left) => {
                    let n = left.min(data.len());
                    out.extend_from_slice(&data[..n]);
                    data = &data[n..];
                    self.state = if n == left {
                        State::Header
                    } else if matches!(self.state, State::Preface(_)) {
                        State::Preface(left - n)
                    } else {
                        State::Payload(left - n)
                    };
                }
                State::Header => {
                    let n = (FRAME_HEADER_LEN - self.pending.len()).min(data.len());
                    self.pending.extend_from_slice(&data[..n]);
                    data = &data[n..];
                    if self.pending.len() == FRAME_HEADER_LEN {
                        self.frame_header(out);
                    }
                }
                State::Held { left, end } => {
                    let n = left.min(data.len());
                    self.held.extend_from_slice(&data[..n]);
                    data = &data[n..];
                    if n < left {
                        self.state = State::Held { left: left - n, end };
                    } else if end {
                        self.end_of_block(out);
                    } else {
                        self.state = State::Header;
                    }
                }
            }
        }
    }

    /// Everything held, as it came (the connection ended mid-block).
    pub fn flush(&mut self, out: &mut Vec<u8>) {
        out.append(&mut self.held);
        out.append(&mut self.pending);
    }

    fn frame_header(&mut self, out: &mut Vec<u8>) {
        let h = std::mem::take(&mut self.pending);
        let len = usize::from(h[0]) << 16 | usize::from(h[1]) << 8 | usize::from(h[2]);
        let (kind, flags) = (h[3], h[4]);
        let in_block = !self.held.is_empty();
        let block_frame = if in_block {
            kind == CONTINUATION
        } else {
            kind == HEADERS
        };
        if !block_frame {
            // A frame other than CONTINUATION inside a block is the client's protocol error: h2 says so.
            if in_block {
                self.off(out);
            } else {
                self.state = if len == 0 {
                    State::Header
                } else {
                    State::Payload(len)
                };
            }
            out.extend_from_slice(&h);
            return;
        }
        if self.held.len() + FRAME_HEADER_LEN + len > MAX_HELD {
            self.off(out);
            out.extend_from_slice(&h);
            return;
        }
        self.held.extend_from_slice(&h);
        let end = flags & END_HEADERS != 0;
        self.state = State::Held { left: len, end };
        if len == 0 {
            self.state = State::Header;
            if end {
                self.end_of_block(out);
            }
        }
    }

    /// Passes what is held unchanged and stops rewriting.
    fn off(&mut self, out: &mut Vec<u8>) {
        self.flush(out);
        self.state = State::Off;
    }

    fn end_of_block(&mut self, out: &mut Vec<u8>) {
        self.state = State::Header;
        match self.rewrite_block() {
            Some(n) => self.rewritten += n,
            None => self.state = State::Off,
        }
        out.append(&mut self.held);
    }

    /// Rewrites the held block's bad authorities in place; None if the block cannot be followed.
    fn rewrite_block(&mut self) -> Option<usize> {
        // The block's bytes, and where each sits in `held`.
        let (mut block, mut at) = (Vec::new(), Vec::new());
        let mut i = 0;
        while i < self.held.len() {
            let h = self.held.get(i..i + FRAME_HEADER_LEN)?;
            let len = usize::from(h[0]) << 16 | usize::from(h[1]) << 8 | usize::from(h[2]);
            let (kind, flags) = (h[3], h[4]);
            let (mut start, mut stop) = (i + FRAME_HEADER_LEN, i + FRAME_HEADER_LEN + len);
            if kind == HEADERS {
                if flags & PADDED != 0 {
                    let pad = usize::from(*self.held.get(start)?);
                    start += 1;
                    stop = stop.checked_sub(pad)?;
                }
                if flags & PRIORITY != 0 {
                    start += 5;
                }
            }
            block.extend_from_slice(self.held.get(start..stop)?);
            at.extend(start..stop);
            i += FRAME_HEADER_LEN + len;
        }
        let mut n = 0;
        for (pos, fixed) in self.authorities(&block)? {
            n += 1;
            for (k, b) in fixed.into_iter().enumerate() {
                self.held[at[pos + k]] = b;
            }
        }
        Some(n)
    }

    /// The literal `:authority` values in `block` that need a rewrite: (offset in the block, new bytes).
    /// Follows the dynamic table's names as it goes.
    fn authorities(&mut self, block: &[u8]) -> Option<Vec<(usize, Vec<u8>)>> {
        let mut fixes = Vec::new();
        let mut i = 0;
        while i < block.len() {
            let first = block[i];
            let (prefix, indexing) = match first {
                b if b & 0x80 != 0 => {
                    integer(block, &mut i, 7)?;
                    continue;
                }
                b if b & 0xC0 == 0x40 => (6, true),
                b if b & 0xE0 == 0x20 => {
                    if integer(block, &mut i, 5)? == 0 {
                        self.dynamic.clear();
                    }
                    continue;
                }
                _ => (4, false),
            };
            let index = integer(block, &mut i, prefix)?;
            let is_authority = if index == 0 {
                let (start, len, huffman) = string(block, &mut i)?;
                !huffman && &block[start..start + len] == b":authority"
            } else if index <= STATIC_ENTRIES {
                index == STATIC_AUTHORITY
            } else {
                *self.dynamic.get(index - STATIC_ENTRIES - 1)?
            };
            let (start, len, huffman) = string(block, &mut i)?;
            let value = &block[start..start + len];
            if is_authority
                && !huffman
                && !value.is_empty()
                && hyper::http::uri::Authority::try_from(value).is_err()
            {
                let fixed = value
                    .iter()
                    .map(|&b| {
                        if b.is_ascii_alphanumeric() || b == b'.' {
                            b
                        } else {
                            b'-'
                        }
                    })
                    .collect();
                fixes.push((start, fixed));
            }
            if indexing {
                self.dynamic.push_front(is_authority);
                self.dynamic.truncate(MAX_DYNAMIC);
            }
        }
        Some(fixes)
    }
}

/// An HPACK integer with a `prefix`-bit prefix at `*i` (RFC 7541 §5.1); advances `*i`.
fn integer(b: &[u8], i: &mut usize, prefix: u32) -> Option<usize> {
    let max = (1usize << prefix) - 1;
    let mut n = usize::from(*b.get(*i)?) & max;
    *i += 1;
    if n < max {
        return Some(n);
    }
    let mut shift = 0;
    loop {
        let byte = *b.get(*i)?;
        *i += 1;
        n = n.checked_add(usize::from(byte & 0x7F).checked_shl(shift)?)?;
        if byte & 0x80 == 0 {
            return Some(n);
        }
        shift += 7;
        if shift > 28 {
            return None;
        }
    }
}

/// An HPACK string literal at `*i` (RFC 7541 §5.2): (start, length, Huffman-coded); advances `*i` past it.
fn string(b: &[u8], i: &mut usize) -> Option<(usize, usize, bool)> {
    let huffman = *b.get(*i)? & 0x80 != 0;
    let len = integer(b, i, 7)?;
    let start = *i;
    let end = start.checked_add(len).filter(|&e| e <= b.len())?;
    *i = end;
    Some((start, len, huffman))
}

/// A connection whose reads pass through a [`Rewriter`]; writes go straight through.
#[derive(Debug)]
pub struct Lenient<S> {
    inner: S,
    rewriter: Rewriter,
    /// Rewritten bytes not yet read, from `taken` on.
    out: Vec<u8>,
    taken: usize,
}

impl<S> Lenient<S> {
    /// Wraps an accepted connection.
    pub fn new(inner: S) -> Self {
        Lenient {
            inner,
            rewriter: Rewriter::default(),
            out: Vec::new(),
            taken: 0,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Lenient<S> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if this.taken < this.out.len() {
                let n = buf.remaining().min(this.out.len() - this.taken);
                buf.put_slice(&this.out[this.taken..this.taken + n]);
                this.taken += n;
                if this.taken == this.out.len() {
                    this.out.clear();
                    this.taken = 0;
                }
                return Poll::Ready(Ok(()));
            }
            let mut chunk = [0u8; 16 * 1024];
            let mut read = ReadBuf::new(&mut chunk);
            ready!(Pin::new(&mut this.inner).poll_read(cx, &mut read))?;
            if read.filled().is_empty() {
                this.rewriter.flush(&mut this.out);
                if this.out.is_empty() {
                    return Poll::Ready(Ok(()));
                }
                continue;
            }
            let before = this.rewriter.rewritten();
            this.rewriter.feed(read.filled(), &mut this.out);
            if before == 0 && this.rewriter.rewritten() > 0 {
                tracing::debug!(
                    "a client's :authority is not a URI authority: read with its odd bytes as '-'"
                );
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Lenient<S> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

impl<S: tonic::transport::server::Connected> tonic::transport::server::Connected for Lenient<S> {
    type ConnectInfo = S::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}
