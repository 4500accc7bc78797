//! The resize channel's parser: terminal sizes as JSON objects (`{"Width":80,"Height":24}`) one after
//! another, cut anywhere by the transport.
//!
//! What is kept between messages is bounded: an unfinished size longer than [`MAX_RESIZE`] (an unterminated
//! string, say) is dropped, so a client can make criusd neither hold its bytes nor parse them again and
//! again (each message is parsed once, with at most [`MAX_RESIZE`] bytes kept from before).

use bytes::BytesMut;

/// The most bytes of one unfinished size kept for the next message (4 KiB; a real one takes about 30).
pub const MAX_RESIZE: usize = 4 * 1024;

/// The sizes read so far off a resize channel.
#[derive(Debug, Default)]
pub struct Sizes {
    buf: BytesMut,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Size {
    width: u16,
    height: u16,
}

impl Sizes {
    /// An empty parser.
    pub fn new() -> Sizes {
        Sizes::default()
    }

    /// Adds `data` and takes the complete sizes (columns, rows) off the front. A malformed size ends the list
    /// and drops what is there (a client that sends garbage gets no resizes, not a crash); an unfinished one
    /// waits for the rest, unless it is over [`MAX_RESIZE`] bytes.
    pub fn push(&mut self, data: &[u8]) -> Vec<(u16, u16)> {
        self.buf.extend_from_slice(data);
        let mut out = Vec::new();
        let mut it = serde_json::Deserializer::from_slice(&self.buf).into_iter::<Size>();
        let used = loop {
            match it.next() {
                Some(Ok(s)) => out.push((s.width, s.height)),
                Some(Err(e)) if e.is_eof() => break it.byte_offset(),
                Some(Err(_)) | None => break self.buf.len(),
            }
        };
        let _ = self.buf.split_to(used);
        if self.buf.len() > MAX_RESIZE {
            tracing::debug!(
                len = self.buf.len(),
                "resize: dropping an unfinished size over {MAX_RESIZE} bytes"
            );
            self.buf = BytesMut::new();
        }
        out
    }

    /// Bytes kept of an unfinished size.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_come_whole_or_wait_for_the_rest() {
        let mut s = Sizes::new();
        assert_eq!(s.push(br#"{"Width":80,"Height":24}{"Width":1"#), vec![(80, 24)]);
        assert_eq!(s.push(br#"00,"Height":40}"#), vec![(100, 40)]);
        assert_eq!(s.buffered(), 0);
        assert!(s.push(b"]]").is_empty());
        assert_eq!(s.buffered(), 0);
    }

    #[test]
    fn an_unterminated_string_is_dropped_past_the_limit() {
        let mut s = Sizes::new();
        assert!(s.push(br#"{"Width":""#).is_empty());
        for _ in 0..1000 {
            assert!(s.push(&[b'a'; 1024]).is_empty());
            assert!(s.buffered() <= MAX_RESIZE, "{}", s.buffered());
        }
        // The stream goes on: a later whole size is read.
        assert_eq!(s.push(br#"{"Width":7,"Height":8}"#), vec![(7, 8)]);
    }
}
