//! SPDY/3.1 frames (framing per the SPDY Protocol draft 3.1) and the [`Codec`] that turns them into bytes and back.
//!
//! A control frame is `1 | version (15 bits) | type (16) | flags (8) | length (24) | data`; a data frame is
//! `0 | stream id (31) | flags (8) | length (24) | payload`. The header blocks of SYN_STREAM, SYN_REPLY and
//! HEADERS are zlib-compressed with one context per direction that lives as long as the connection (see
//! the private `zlib` module), so frames must be encoded and decoded in the order they are sent.

use bytes::Bytes;

pub use super::codec::{Codec, Decoder, Encoder};
pub use super::dict::DICTIONARY;
pub use super::headers::{Headers, MAX_HEADER_BLOCK, MAX_HEADER_PAIRS};

/// The SPDY version this crate speaks.
pub const VERSION: u16 = 3;

/// The largest length a frame can carry (24 bits).
pub const MAX_FRAME_LEN: usize = (1 << 24) - 1;

/// The largest DATA payload a session accepts from its peer by default (64 KiB): spdystream sends each write
/// as one frame, which `io.Copy` keeps at 32 KiB, and the reader never holds more than this for one frame.
pub const MAX_DATA_FRAME: usize = 64 * 1024;

/// The largest control frame accepted (64 KiB): a header block inflating to at most [`MAX_HEADER_BLOCK`] cannot
/// take more than this compressed.
pub const MAX_CONTROL_FRAME_LEN: usize = MAX_HEADER_BLOCK + 4096;

/// RST_STREAM status: the peer broke the protocol.
pub const RST_PROTOCOL_ERROR: u32 = 1;
/// RST_STREAM status: a frame for a stream that is not open.
pub const RST_INVALID_STREAM: u32 = 2;
/// RST_STREAM status: the stream was refused before any processing.
pub const RST_REFUSED_STREAM: u32 = 3;
/// RST_STREAM status: the stream is no longer needed.
pub const RST_CANCEL: u32 = 5;
/// RST_STREAM status: an internal error ended the stream.
pub const RST_INTERNAL_ERROR: u32 = 6;
/// GOAWAY status: a normal end of the session.
pub const GOAWAY_OK: u32 = 0;
/// GOAWAY status: the peer broke the protocol.
pub const GOAWAY_PROTOCOL_ERROR: u32 = 1;
/// GOAWAY status: an internal error ended the session.
pub const GOAWAY_INTERNAL_ERROR: u32 = 2;

/// One SETTINGS entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Setting {
    /// The entry's flags (`FLAG_SETTINGS_PERSIST_VALUE` 0x1, `FLAG_SETTINGS_PERSISTED` 0x2).
    pub flags: u8,
    /// The setting's id (24 bits).
    pub id: u32,
    /// Its value.
    pub value: u32,
}

/// A SPDY/3.1 frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame {
    /// Opens a stream.
    SynStream {
        /// The new stream's id (odd from the client, even from the server).
        stream_id: u32,
        /// The stream this one is associated to (0: none).
        associated_to: u32,
        /// 0 (highest) to 7.
        priority: u8,
        /// The credential slot (0: none).
        slot: u8,
        /// The sender sends nothing more on this stream.
        fin: bool,
        /// The receiver must not send on this stream.
        unidirectional: bool,
        /// The stream's headers.
        headers: Headers,
    },
    /// Accepts a stream the peer opened.
    SynReply {
        /// The stream replied to.
        stream_id: u32,
        /// The sender sends nothing more on this stream.
        fin: bool,
        /// The reply's headers.
        headers: Headers,
    },
    /// Ends a stream abnormally.
    RstStream {
        /// The stream reset.
        stream_id: u32,
        /// Why (`RST_*`).
        status: u32,
    },
    /// Connection settings.
    Settings {
        /// Forget persisted settings.
        clear: bool,
        /// The entries.
        entries: Vec<Setting>,
    },
    /// A liveness check, answered with the same id.
    Ping {
        /// Odd from the client, even from the server.
        id: u32,
    },
    /// Ends the session: no new streams.
    GoAway {
        /// The last stream the sender accepted from the receiver.
        last_good_stream_id: u32,
        /// Why (`GOAWAY_*`).
        status: u32,
    },
    /// More headers for a stream.
    Headers {
        /// The stream.
        stream_id: u32,
        /// The sender sends nothing more on this stream.
        fin: bool,
        /// The headers.
        headers: Headers,
    },
    /// Flow-control credit (stream 0: the whole connection).
    WindowUpdate {
        /// The stream, or 0.
        stream_id: u32,
        /// The credit added (31 bits).
        delta: u32,
    },
    /// Stream data.
    Data {
        /// The stream (never 0).
        stream_id: u32,
        /// The sender sends nothing more on this stream.
        fin: bool,
        /// The payload.
        data: Bytes,
    },
}

/// What was wrong with a frame, encoded or decoded. After a decode error the connection cannot go on (the
/// header decompression context may be out of step with the peer's).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// A control frame of a version other than 3.
    #[error("unsupported SPDY version {0}")]
    BadVersion(u16),
    /// A frame longer than allowed.
    #[error("frame of {len} bytes is over the limit of {max}")]
    TooLarge {
        /// The frame's length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A control frame whose length does not fit its type.
    #[error("{kind} frame with a bad length of {len}")]
    BadLength {
        /// The frame type.
        kind: &'static str,
        /// Its length.
        len: usize,
    },
    /// A frame that must name a stream named stream 0.
    #[error("{0} frame for stream 0")]
    ZeroStreamId(&'static str),
    /// A stream id over 31 bits (when encoding).
    #[error("stream id {0} is over 31 bits")]
    InvalidStreamId(u32),
    /// A priority over 7 (when encoding).
    #[error("priority {0} is over 7")]
    InvalidPriority(u8),
    /// A SETTINGS id over 24 bits (when encoding).
    #[error("setting id {0} is over 24 bits")]
    InvalidSetting(u32),
    /// The zlib stream of the header blocks is broken.
    #[error("header compression: {0}")]
    Zlib(String),
    /// The peer's zlib stream wants another dictionary than SPDY/3's.
    #[error("header block asks for an unknown dictionary {0:#010x}")]
    WrongDictionary(u32),
    /// A header block inflating to more than [`MAX_HEADER_BLOCK`].
    #[error("header block over {MAX_HEADER_BLOCK} bytes")]
    HeaderBlockTooLarge,
    /// A header block that ends inside a pair or its count.
    #[error("truncated header block")]
    TruncatedHeaderBlock,
    /// More pairs than [`MAX_HEADER_PAIRS`].
    #[error("header block of {0} pairs is over the limit of {MAX_HEADER_PAIRS}")]
    TooManyHeaders(usize),
    /// A header the block format does not allow.
    #[error("invalid header block: {0}")]
    InvalidHeader(&'static str),
}

#[cfg(test)]
#[path = "frame_tests.rs"]
mod tests;
