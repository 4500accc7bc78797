//! The [`Codec`]: frames to bytes and back, with the connection's two header compression contexts.

use bytes::{Buf, BufMut, Bytes, BytesMut};

use super::frame::{
    Frame, FrameError, MAX_CONTROL_FRAME_LEN, MAX_DATA_FRAME, MAX_FRAME_LEN, Setting, VERSION,
};
use super::zlib::{Deflater, Inflater};

const TYPE_SYN_STREAM: u16 = 1;
const TYPE_SYN_REPLY: u16 = 2;
const TYPE_RST_STREAM: u16 = 3;
const TYPE_SETTINGS: u16 = 4;
const TYPE_PING: u16 = 6;
const TYPE_GOAWAY: u16 = 7;
const TYPE_HEADERS: u16 = 8;
const TYPE_WINDOW_UPDATE: u16 = 9;

const FLAG_FIN: u8 = 0x01;
const FLAG_UNIDIRECTIONAL: u8 = 0x02;
const FLAG_CLEAR_SETTINGS: u8 = 0x01;
pub(crate) const MAX_STREAM_ID: u32 = 0x7fff_ffff;

/// Turns frames into bytes ([`encode`](Self::encode)) and bytes into frames ([`decode`](Self::decode)): one
/// connection's two header compression contexts, the sending one and the receiving one.
#[derive(Debug, Default)]
pub struct Codec {
    encoder: Encoder,
    decoder: Decoder,
}

impl Codec {
    /// A codec for a new connection.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends `frame` to `out` (nothing on error).
    ///
    /// # Errors
    /// A field out of range, a payload over [`MAX_FRAME_LEN`] or a header block over its limits.
    pub fn encode(&mut self, frame: &Frame, out: &mut BytesMut) -> Result<(), FrameError> {
        self.encoder.encode(frame, out)
    }

    /// Takes the next frame off the front of `buf`: `None` if `buf` does not hold a whole frame yet. Control
    /// frames of unknown types are skipped.
    ///
    /// # Errors
    /// A malformed frame; the connection should end.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Frame>, FrameError> {
        self.decoder.decode(buf)
    }

    /// The sending and the receiving halves, for a connection that writes and reads in different tasks.
    #[must_use]
    pub fn into_parts(self) -> (Encoder, Decoder) {
        (self.encoder, self.decoder)
    }
}

/// The sending half of a [`Codec`].
#[derive(Debug, Default)]
pub struct Encoder {
    deflater: Deflater,
}

impl Encoder {
    /// As [`Codec::encode`].
    ///
    /// # Errors
    /// As [`Codec::encode`].
    pub fn encode(&mut self, frame: &Frame, out: &mut BytesMut) -> Result<(), FrameError> {
        match frame {
            Frame::SynStream {
                stream_id,
                associated_to,
                priority,
                slot,
                fin,
                unidirectional,
                headers,
            } => {
                check_id(*stream_id, "SYN_STREAM")?;
                check_id(*associated_to, "")?;
                if *priority > 7 {
                    return Err(FrameError::InvalidPriority(*priority));
                }
                let block = self.deflater.compress(headers)?;
                let flags = flag(*fin, FLAG_FIN) | flag(*unidirectional, FLAG_UNIDIRECTIONAL);
                control(out, TYPE_SYN_STREAM, flags, 10 + block.len());
                out.put_u32(*stream_id);
                out.put_u32(*associated_to);
                out.put_u8(priority << 5);
                out.put_u8(*slot);
                out.put_slice(&block);
            }
            Frame::SynReply {
                stream_id,
                fin,
                headers,
            }
            | Frame::Headers {
                stream_id,
                fin,
                headers,
            } => {
                let (kind, ty) = match frame {
                    Frame::SynReply { .. } => ("SYN_REPLY", TYPE_SYN_REPLY),
                    _ => ("HEADERS", TYPE_HEADERS),
                };
                check_id(*stream_id, kind)?;
                let block = self.deflater.compress(headers)?;
                control(out, ty, flag(*fin, FLAG_FIN), 4 + block.len());
                out.put_u32(*stream_id);
                out.put_slice(&block);
            }
            Frame::RstStream { stream_id, status } => {
                check_id(*stream_id, "RST_STREAM")?;
                control(out, TYPE_RST_STREAM, 0, 8);
                out.put_u32(*stream_id);
                out.put_u32(*status);
            }
            Frame::Settings { clear, entries } => {
                if let Some(bad) = entries.iter().find(|e| e.id > 0xff_ffff) {
                    return Err(FrameError::InvalidSetting(bad.id));
                }
                let len = entries.len().saturating_mul(8).saturating_add(4);
                if len > MAX_CONTROL_FRAME_LEN {
                    return Err(FrameError::TooLarge {
                        len,
                        max: MAX_CONTROL_FRAME_LEN,
                    });
                }
                control(out, TYPE_SETTINGS, flag(*clear, FLAG_CLEAR_SETTINGS), len);
                out.put_u32(u32::try_from(entries.len()).unwrap_or(u32::MAX));
                for e in entries {
                    out.put_u32(u32::from(e.flags) << 24 | e.id);
                    out.put_u32(e.value);
                }
            }
            Frame::Ping { id } => {
                control(out, TYPE_PING, 0, 4);
                out.put_u32(*id);
            }
            Frame::GoAway {
                last_good_stream_id,
                status,
            } => {
                check_id(*last_good_stream_id, "")?;
                control(out, TYPE_GOAWAY, 0, 8);
                out.put_u32(*last_good_stream_id);
                out.put_u32(*status);
            }
            Frame::WindowUpdate { stream_id, delta } => {
                check_id(*stream_id, "")?;
                control(out, TYPE_WINDOW_UPDATE, 0, 8);
                out.put_u32(*stream_id);
                out.put_u32(delta & MAX_STREAM_ID);
            }
            Frame::Data { stream_id, fin, data } => {
                check_id(*stream_id, "DATA")?;
                if data.len() > MAX_FRAME_LEN {
                    return Err(FrameError::TooLarge {
                        len: data.len(),
                        max: MAX_FRAME_LEN,
                    });
                }
                out.reserve(8 + data.len());
                out.put_u32(*stream_id);
                out.put_u32(u32::from(flag(*fin, FLAG_FIN)) << 24 | len24(data.len()));
                out.put_slice(data);
            }
        }
        Ok(())
    }
}

/// The receiving half of a [`Codec`].
#[derive(Debug)]
pub struct Decoder {
    inflater: Inflater,
    max_data_len: usize,
}

impl Default for Decoder {
    fn default() -> Self {
        Self {
            inflater: Inflater::default(),
            max_data_len: MAX_DATA_FRAME,
        }
    }
}

impl Decoder {
    /// Refuses DATA frames with more than `max` bytes of payload (at most [`MAX_FRAME_LEN`]; by default
    /// [`MAX_DATA_FRAME`]), so that a peer cannot make the reader hold more than that for one frame.
    pub fn set_max_data_len(&mut self, max: usize) {
        self.max_data_len = max.min(MAX_FRAME_LEN);
    }

    /// As [`Codec::decode`].
    ///
    /// # Errors
    /// As [`Codec::decode`].
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Frame>, FrameError> {
        loop {
            let Some(head) = buf.first_chunk::<8>() else {
                return Ok(None);
            };
            let word = u32::from_be_bytes([head[0], head[1], head[2], head[3]]);
            let flags = head[4];
            let len = usize::from(head[5]) << 16 | usize::from(head[6]) << 8 | usize::from(head[7]);
            let control = word & 0x8000_0000 != 0;
            // Checked on the 8 header bytes alone, so that garbage is refused before waiting for its length.
            if control {
                let version = u16::try_from(word >> 16 & 0x7fff).unwrap_or(u16::MAX);
                if version != VERSION {
                    return Err(FrameError::BadVersion(version));
                }
                if len > MAX_CONTROL_FRAME_LEN {
                    return Err(FrameError::TooLarge {
                        len,
                        max: MAX_CONTROL_FRAME_LEN,
                    });
                }
            } else {
                if word == 0 {
                    return Err(FrameError::ZeroStreamId("DATA"));
                }
                if len > self.max_data_len {
                    return Err(FrameError::TooLarge {
                        len,
                        max: self.max_data_len,
                    });
                }
            }
            if buf.len() < 8 + len {
                buf.reserve(8 + len - buf.len());
                return Ok(None);
            }
            buf.advance(8);
            let body = buf.split_to(len).freeze();
            if !control {
                return Ok(Some(Frame::Data {
                    stream_id: word,
                    fin: flags & FLAG_FIN != 0,
                    data: body,
                }));
            }
            let ty = u16::try_from(word & 0xffff).unwrap_or(u16::MAX);
            if let Some(frame) = self.control(ty, flags, body)? {
                return Ok(Some(frame));
            }
        }
    }

    fn control(&mut self, ty: u16, flags: u8, mut body: Bytes) -> Result<Option<Frame>, FrameError> {
        let len = body.len();
        let fin = flags & FLAG_FIN != 0;
        let frame = match ty {
            TYPE_SYN_STREAM => {
                at_least(len, 10, "SYN_STREAM")?;
                let stream_id = stream_id(&mut body, "SYN_STREAM")?;
                let associated_to = body.get_u32() & MAX_STREAM_ID;
                let priority = body.get_u8() >> 5;
                let slot = body.get_u8();
                let headers = self.inflater.headers(&body)?;
                let unidirectional = flags & FLAG_UNIDIRECTIONAL != 0;
                Frame::SynStream {
                    stream_id,
                    associated_to,
                    priority,
                    slot,
                    fin,
                    unidirectional,
                    headers,
                }
            }
            TYPE_SYN_REPLY => {
                at_least(len, 4, "SYN_REPLY")?;
                let stream_id = stream_id(&mut body, "SYN_REPLY")?;
                Frame::SynReply {
                    stream_id,
                    fin,
                    headers: self.inflater.headers(&body)?,
                }
            }
            TYPE_HEADERS => {
                at_least(len, 4, "HEADERS")?;
                let stream_id = stream_id(&mut body, "HEADERS")?;
                Frame::Headers {
                    stream_id,
                    fin,
                    headers: self.inflater.headers(&body)?,
                }
            }
            TYPE_RST_STREAM => {
                exactly(len, 8, "RST_STREAM")?;
                Frame::RstStream {
                    stream_id: stream_id(&mut body, "RST_STREAM")?,
                    status: body.get_u32(),
                }
            }
            TYPE_SETTINGS => {
                at_least(len, 4, "SETTINGS")?;
                let count = body.get_u32() as usize;
                if count.checked_mul(8) != Some(body.len()) {
                    return Err(FrameError::BadLength {
                        kind: "SETTINGS",
                        len,
                    });
                }
                let entries = (0..count)
                    .map(|_| {
                        let word = body.get_u32();
                        let flags = u8::try_from(word >> 24).unwrap_or(u8::MAX);
                        Setting {
                            flags,
                            id: word & 0xff_ffff,
                            value: body.get_u32(),
                        }
                    })
                    .collect();
                Frame::Settings {
                    clear: flags & FLAG_CLEAR_SETTINGS != 0,
                    entries,
                }
            }
            TYPE_PING => {
                exactly(len, 4, "PING")?;
                Frame::Ping { id: body.get_u32() }
            }
            TYPE_GOAWAY => {
                exactly(len, 8, "GOAWAY")?;
                Frame::GoAway {
                    last_good_stream_id: body.get_u32() & MAX_STREAM_ID,
                    status: body.get_u32(),
                }
            }
            TYPE_WINDOW_UPDATE => {
                exactly(len, 8, "WINDOW_UPDATE")?;
                let stream_id = body.get_u32() & MAX_STREAM_ID;
                Frame::WindowUpdate {
                    stream_id,
                    delta: body.get_u32() & MAX_STREAM_ID,
                }
            }
            _ => return Ok(None),
        };
        Ok(Some(frame))
    }
}

fn control(out: &mut BytesMut, ty: u16, flags: u8, len: usize) {
    out.reserve(8 + len);
    out.put_u16(0x8000 | VERSION);
    out.put_u16(ty);
    out.put_u32(u32::from(flags) << 24 | len24(len));
}

/// `len` as the 24-bit field; callers keep frames within [`MAX_FRAME_LEN`].
fn len24(len: usize) -> u32 {
    u32::try_from(len.min(MAX_FRAME_LEN)).unwrap_or(0xff_ffff)
}

fn flag(set: bool, bit: u8) -> u8 {
    if set { bit } else { 0 }
}

/// A stream id must fit 31 bits; with `kind`, it must also not be 0.
fn check_id(id: u32, kind: &'static str) -> Result<(), FrameError> {
    if id > MAX_STREAM_ID {
        return Err(FrameError::InvalidStreamId(id));
    }
    if id == 0 && !kind.is_empty() {
        return Err(FrameError::ZeroStreamId(kind));
    }
    Ok(())
}

fn stream_id(body: &mut Bytes, kind: &'static str) -> Result<u32, FrameError> {
    let id = body.get_u32() & MAX_STREAM_ID;
    if id == 0 {
        return Err(FrameError::ZeroStreamId(kind));
    }
    Ok(id)
}

fn at_least(len: usize, min: usize, kind: &'static str) -> Result<(), FrameError> {
    if len < min {
        return Err(FrameError::BadLength { kind, len });
    }
    Ok(())
}

fn exactly(len: usize, want: usize, kind: &'static str) -> Result<(), FrameError> {
    if len != want {
        return Err(FrameError::BadLength { kind, len });
    }
    Ok(())
}
