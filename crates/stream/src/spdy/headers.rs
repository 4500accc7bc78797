//! SPDY/3 header blocks before compression: a 32-bit count of pairs, then per pair a 32-bit length and the
//! lower-case name, a 32-bit length and the value (several values of one name are joined by a NUL byte).

use super::frame::FrameError;

/// The most bytes one header block may inflate to; more is a protocol error, never an allocation.
pub const MAX_HEADER_BLOCK: usize = 60 * 1024;

/// The most (name, value) pairs one header block may hold.
pub const MAX_HEADER_PAIRS: usize = 1024;

/// The headers of a SYN_STREAM, SYN_REPLY or HEADERS frame: (name, value) pairs in the order they were inserted
/// or received. Names are lower-case and unique; a name with several values holds them joined by a NUL byte, as
/// SPDY/3 sends them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Headers {
    pairs: Vec<(String, String)>,
}

impl Headers {
    /// No headers.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// The value of `name` (compared case-insensitively), several values joined by NUL as sent.
    #[must_use]
    pub fn get(&self, name: &str) -> Option<&str> {
        self.position(name).map(|i| self.pairs[i].1.as_str())
    }

    /// Each value of `name` (compared case-insensitively): the NUL-separated parts of its value.
    pub fn get_all<'a>(&'a self, name: &str) -> impl Iterator<Item = &'a str> + 'a {
        self.get(name).into_iter().flat_map(|v| v.split('\0'))
    }

    /// Sets `name` (lower-cased) to `value`, replacing any value it had; a new name goes last.
    pub fn insert(&mut self, name: impl Into<String>, value: impl Into<String>) {
        let name = name.into().to_ascii_lowercase();
        let value = value.into();
        match self.position(&name) {
            Some(i) => self.pairs[i].1 = value,
            None => self.pairs.push((name, value)),
        }
    }

    /// Adds `value` to `name` (lower-cased): joined to an existing value by NUL, or as a new pair last.
    pub fn append(&mut self, name: impl Into<String>, value: impl Into<String>) {
        let name = name.into().to_ascii_lowercase();
        let value = value.into();
        match self.position(&name) {
            Some(i) => {
                let old = &mut self.pairs[i].1;
                old.push('\0');
                old.push_str(&value);
            }
            None => self.pairs.push((name, value)),
        }
    }

    /// Removes `name` (compared case-insensitively) and returns its value.
    pub fn remove(&mut self, name: &str) -> Option<String> {
        self.position(name).map(|i| self.pairs.remove(i).1)
    }

    /// The (name, value) pairs in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.pairs.iter().map(|(n, v)| (n.as_str(), v.as_str()))
    }

    /// How many names there are.
    #[must_use]
    pub fn len(&self) -> usize {
        self.pairs.len()
    }

    /// Whether there are no headers.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.pairs.is_empty()
    }

    fn position(&self, name: &str) -> Option<usize> {
        self.pairs.iter().position(|(n, _)| n.eq_ignore_ascii_case(name))
    }

    /// Appends the uncompressed block to `out`.
    pub(crate) fn write_block(&self, out: &mut Vec<u8>) -> Result<(), FrameError> {
        if self.pairs.len() > MAX_HEADER_PAIRS {
            return Err(FrameError::TooManyHeaders(self.pairs.len()));
        }
        put_len(out, self.pairs.len())?;
        for (name, value) in &self.pairs {
            if name.is_empty() {
                return Err(FrameError::InvalidHeader("empty header name"));
            }
            put_len(out, name.len())?;
            out.extend_from_slice(name.as_bytes());
            put_len(out, value.len())?;
            out.extend_from_slice(value.as_bytes());
        }
        if out.len() > MAX_HEADER_BLOCK {
            return Err(FrameError::HeaderBlockTooLarge);
        }
        Ok(())
    }

    /// Parses an uncompressed block, which must be used up exactly.
    pub(crate) fn read_block(mut block: &[u8]) -> Result<Self, FrameError> {
        let count = take_u32(&mut block)? as usize;
        // Each pair takes at least its two 4-byte lengths: a count the data cannot hold is refused before
        // anything is allocated for it.
        if count > MAX_HEADER_PAIRS {
            return Err(FrameError::TooManyHeaders(count));
        }
        if count.saturating_mul(8) > block.len() {
            return Err(FrameError::TruncatedHeaderBlock);
        }
        let mut headers = Self {
            pairs: Vec::with_capacity(count),
        };
        for _ in 0..count {
            let name = take_str(&mut block)?;
            if name.is_empty() {
                return Err(FrameError::InvalidHeader("empty header name"));
            }
            let value = take_str(&mut block)?;
            // Peers lower-case names; one that did not is taken lower-cased, and a repeated name is one more
            // value of it rather than an error that would end the whole session.
            headers.append(name, value);
        }
        if !block.is_empty() {
            return Err(FrameError::InvalidHeader("bytes after the last header"));
        }
        Ok(headers)
    }
}

impl<K: Into<String>, V: Into<String>> FromIterator<(K, V)> for Headers {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let mut headers = Self::new();
        for (k, v) in iter {
            headers.append(k, v);
        }
        headers
    }
}

fn put_len(out: &mut Vec<u8>, len: usize) -> Result<(), FrameError> {
    let len = u32::try_from(len).map_err(|_| FrameError::HeaderBlockTooLarge)?;
    out.extend_from_slice(&len.to_be_bytes());
    Ok(())
}

fn take_u32(block: &mut &[u8]) -> Result<u32, FrameError> {
    let (head, rest) = block
        .split_first_chunk::<4>()
        .ok_or(FrameError::TruncatedHeaderBlock)?;
    *block = rest;
    Ok(u32::from_be_bytes(*head))
}

fn take_str(block: &mut &[u8]) -> Result<String, FrameError> {
    let len = take_u32(block)? as usize;
    if len > block.len() {
        return Err(FrameError::TruncatedHeaderBlock);
    }
    let (s, rest) = block.split_at(len);
    *block = rest;
    String::from_utf8(s.to_vec()).map_err(|_| FrameError::InvalidHeader("header not UTF-8"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_get_append_remove() {
        let mut h = Headers::new();
        h.insert("StreamType", "data");
        h.insert("port", "80");
        assert_eq!(h.get("streamtype"), Some("data"));
        assert_eq!(h.get("STREAMTYPE"), Some("data"));
        h.insert("streamtype", "error");
        assert_eq!(h.len(), 2);
        assert_eq!(h.iter().next(), Some(("streamtype", "error")));
        h.append("port", "81");
        assert_eq!(h.get("port"), Some("80\081"));
        assert_eq!(h.get_all("port").collect::<Vec<_>>(), ["80", "81"]);
        assert_eq!(h.remove("Port").as_deref(), Some("80\081"));
        assert_eq!(h.get("port"), None);
        assert!(!h.is_empty());
    }

    #[test]
    fn block_round_trip() {
        let h: Headers = [("a", "1"), ("b", ""), ("a", "2")].into_iter().collect();
        let mut out = Vec::new();
        h.write_block(&mut out).unwrap();
        assert_eq!(Headers::read_block(&out).unwrap(), h);
    }

    #[test]
    fn malformed_blocks() {
        assert_eq!(
            Headers::read_block(&[0, 0]),
            Err(FrameError::TruncatedHeaderBlock)
        );
        assert_eq!(
            Headers::read_block(&[0, 0, 0, 5, 0, 0]),
            Err(FrameError::TruncatedHeaderBlock)
        );
        assert_eq!(
            Headers::read_block(&[0xff, 0xff, 0xff, 0xff]),
            Err(FrameError::TooManyHeaders(0xffff_ffff))
        );
        // One pair whose name claims more bytes than follow.
        let block = [0, 0, 0, 1, 0, 0, 0, 9, b'a', 0, 0, 0, 0];
        assert_eq!(Headers::read_block(&block), Err(FrameError::TruncatedHeaderBlock));
        let block = [0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0];
        assert!(matches!(
            Headers::read_block(&block),
            Err(FrameError::InvalidHeader(_))
        ));
        let block = [0, 0, 0, 0, 1];
        assert!(matches!(
            Headers::read_block(&block),
            Err(FrameError::InvalidHeader(_))
        ));
    }
}
