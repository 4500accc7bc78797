//! The header blocks' compression: one zlib stream per direction for the whole connection, primed with the
//! SPDY/3 dictionary, each block ended by a sync flush so that the receiver can inflate it whole.

use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};

use super::dict::DICTIONARY;
use super::frame::FrameError;
use super::headers::{Headers, MAX_HEADER_BLOCK};

/// The sending context.
pub(crate) struct Deflater {
    zlib: Compress,
    primed: bool,
    block: Vec<u8>,
}

impl Default for Deflater {
    fn default() -> Self {
        Self {
            zlib: Compress::new(Compression::default(), true),
            primed: false,
            block: Vec::new(),
        }
    }
}

impl std::fmt::Debug for Deflater {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Deflater")
            .field("total_in", &self.zlib.total_in())
            .finish_non_exhaustive()
    }
}

impl Deflater {
    /// The compressed block of `headers`, ending on a byte boundary (sync flush).
    pub(crate) fn compress(&mut self, headers: &Headers) -> Result<Vec<u8>, FrameError> {
        self.block.clear();
        headers.write_block(&mut self.block)?;
        if !self.primed {
            self.zlib
                .set_dictionary(DICTIONARY)
                .map_err(|e| FrameError::Zlib(e.to_string()))?;
            self.primed = true;
        }
        let mut out = Vec::with_capacity(self.block.len() / 2 + 64);
        let mut pos = 0;
        loop {
            let before = self.zlib.total_in();
            self.zlib
                .compress_vec(&self.block[pos..], &mut out, FlushCompress::Sync)
                .map_err(|e| FrameError::Zlib(e.to_string()))?;
            pos += usize::try_from(self.zlib.total_in() - before)
                .unwrap_or(usize::MAX)
                .min(self.block.len() - pos);
            // zlib is done flushing once it has taken all input and left room in the output.
            if pos == self.block.len() && out.len() < out.capacity() {
                return Ok(out);
            }
            out.reserve(out.capacity().max(256));
        }
    }
}

/// The receiving context.
#[derive(Default)]
pub(crate) struct Inflater {
    zlib: Option<Decompress>,
}

impl std::fmt::Debug for Inflater {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inflater")
            .field("total_in", &self.zlib.as_ref().map(Decompress::total_in))
            .finish()
    }
}

impl Inflater {
    /// The headers of one compressed block; an empty block is taken as no headers.
    pub(crate) fn headers(&mut self, compressed: &[u8]) -> Result<Headers, FrameError> {
        if compressed.is_empty() {
            return Ok(Headers::new());
        }
        let block = self.inflate(compressed)?;
        Headers::read_block(&block)
    }

    fn inflate(&mut self, input: &[u8]) -> Result<Vec<u8>, FrameError> {
        let zlib = self.zlib.get_or_insert_with(|| Decompress::new(true));
        let mut out: Vec<u8> = Vec::new();
        let mut pos = 0;
        let mut primed = false;
        loop {
            if out.len() == out.capacity() {
                if out.len() > MAX_HEADER_BLOCK {
                    return Err(FrameError::HeaderBlockTooLarge);
                }
                // Grown in steps, never past the cap (plus one byte to tell "exactly the cap" from "over").
                let step = out
                    .len()
                    .clamp(1024, 64 * 1024)
                    .min(MAX_HEADER_BLOCK + 1 - out.len());
                out.reserve_exact(step);
            }
            let (in_before, out_before) = (zlib.total_in(), out.len());
            let result = zlib.decompress_vec(&input[pos..], &mut out, FlushDecompress::Sync);
            let consumed = usize::try_from(zlib.total_in() - in_before).unwrap_or(usize::MAX);
            pos = pos.saturating_add(consumed).min(input.len());
            match result {
                Ok(Status::Ok | Status::BufError) => {}
                Ok(Status::StreamEnd) => {
                    return Err(FrameError::Zlib("the peer ended its header zlib stream".into()));
                }
                Err(e) => match e.needs_dictionary() {
                    Some(id) if id == adler32(DICTIONARY) && !primed => {
                        primed = true;
                        zlib.set_dictionary(DICTIONARY)
                            .map_err(|e| FrameError::Zlib(e.to_string()))?;
                        continue;
                    }
                    Some(id) => return Err(FrameError::WrongDictionary(id)),
                    None => return Err(FrameError::Zlib(e.to_string())),
                },
            }
            if out.len() > MAX_HEADER_BLOCK {
                return Err(FrameError::HeaderBlockTooLarge);
            }
            let progressed = consumed > 0 || out.len() > out_before;
            // All input taken and room left: the block is out. No progress with room left: the input ends
            // inside a deflate block, which the header parser reports as a truncated block.
            if (pos == input.len() || !progressed) && out.len() < out.capacity() {
                return Ok(out);
            }
        }
    }
}

/// The Adler-32 checksum zlib names a dictionary by.
pub(crate) fn adler32(data: &[u8]) -> u32 {
    let (mut a, mut b) = (1u32, 0u32);
    for chunk in data.chunks(5552) {
        for &x in chunk {
            a += u32::from(x);
            b += a;
        }
        a %= 65521;
        b %= 65521;
    }
    b << 16 | a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dictionary_is_spdy3s() {
        // The id every SPDY/3 zlib stream carries in its header (FDICT).
        assert_eq!(DICTIONARY.len(), 1423);
        assert_eq!(adler32(DICTIONARY), 0xe3c6_a7c2);
    }

    #[test]
    fn blocks_share_one_stream() {
        let (mut d, mut i) = (Deflater::default(), Inflater::default());
        let h: Headers = [("streamtype", "stdout"), ("requestid", "1")]
            .into_iter()
            .collect();
        let first = d.compress(&h).unwrap();
        let second = d.compress(&h).unwrap();
        // The second block refers back to the first: it is shorter and only inflates after it.
        assert!(second.len() < first.len(), "{} {}", second.len(), first.len());
        assert_eq!(&first[2..6], &0xe3c6_a7c2u32.to_be_bytes());
        assert_eq!(i.headers(&first).unwrap(), h);
        assert_eq!(i.headers(&second).unwrap(), h);
        let mut fresh = Inflater::default();
        assert!(fresh.headers(&second).is_err());
    }

    #[test]
    fn inflation_is_capped() {
        // A block of highly repetitive data compresses tiny and inflates past the cap.
        let mut big = Compress::new(Compression::best(), true);
        big.set_dictionary(DICTIONARY).unwrap();
        let mut block = vec![0, 0, 0, 1, 0, 0, 0, 1, b'a'];
        block.extend_from_slice(&u32::try_from(MAX_HEADER_BLOCK * 4).unwrap().to_be_bytes());
        block.resize(MAX_HEADER_BLOCK * 4 + 13, b'x');
        let mut out = Vec::with_capacity(1 << 20);
        big.compress_vec(&block, &mut out, FlushCompress::Sync).unwrap();
        assert!(out.len() < 8192);
        assert_eq!(
            Inflater::default().headers(&out),
            Err(FrameError::HeaderBlockTooLarge)
        );
    }

    #[test]
    fn broken_streams() {
        let mut i = Inflater::default();
        assert!(matches!(i.headers(&[1, 2, 3, 4, 5]), Err(FrameError::Zlib(_))));
        // A zlib header naming another dictionary.
        let mut other = Compress::new(Compression::default(), true);
        other.set_dictionary(b"something else").unwrap();
        let mut out = Vec::with_capacity(64);
        other
            .compress_vec(&[0, 0, 0, 0], &mut out, FlushCompress::Sync)
            .unwrap();
        assert!(matches!(
            Inflater::default().headers(&out),
            Err(FrameError::WrongDictionary(_))
        ));
        // A stream cut inside a block.
        let h: Headers = [("a", "b".repeat(300))].into_iter().collect();
        let whole = Deflater::default().compress(&h).unwrap();
        assert!(Inflater::default().headers(&whole[..whole.len() - 10]).is_err());
    }
}
