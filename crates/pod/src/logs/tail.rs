//! `--tail N`: where the last N lines of a log begin, found by reading it backwards in chunks, so that the tail
//! of a log of hundreds of megabytes costs a few reads.
//!
//! A line is what `kubectl logs` prints: a full (`F`) record ends one, with the partial (`P`) records of its
//! stream before it; a line not in the CRI format is one on its own; an unfinished partial line at the very
//! end counts as one (it is printed as one). The search reads, of each physical line, only its first
//! [`HEADER_MAX`] bytes as far as they are not read already.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

use crius_common::cri_log::{HEADER_MAX, parse};

/// How much is read at a time, backwards.
const CHUNK: usize = 64 * 1024;

/// Counts lines from the end, one physical line at a time.
struct Count {
    want: u64,
    ends: u64,
    /// The start of the physical line visited before (the one after the current one in the file).
    next_start: u64,
    /// No physical line visited yet: the current one is the file's last.
    last: bool,
}

impl Count {
    /// Visits the physical line starting at `start`, whose bytes begin `head`; Some(offset) when the
    /// wanted lines begin at offset.
    fn visit(&mut self, start: u64, head: &[u8]) -> Option<u64> {
        let head = &head[..head.len().min(HEADER_MAX)];
        let head = head.split(|b| *b == b'\n').next().unwrap_or_default();
        let ends_line = parse(head).is_none_or(|r| !r.partial || self.last);
        self.last = false;
        if ends_line {
            self.ends += 1;
            if self.ends > self.want {
                return Some(self.next_start);
            }
        }
        self.next_start = start;
        None
    }
}

/// The offset at which the last `n` lines of `file`'s first `len` bytes begin (0 if it has fewer), and how
/// many bytes were read to find it.
pub(super) fn start_of_last(file: &File, len: u64, n: u64) -> io::Result<(u64, u64)> {
    if n == 0 {
        return Ok((len, 0));
    }
    let mut count = Count {
        want: n,
        ends: 0,
        next_start: len,
        last: true,
    };
    let mut read = 0u64;
    let mut pos = len;
    // The first HEADER_MAX bytes at `pos`: the heads of lines that start in the chunk before it.
    let mut carry: Vec<u8> = Vec::new();
    while pos > 0 {
        let start = pos.saturating_sub(CHUNK as u64);
        let mut buf = vec![0u8; (pos - start) as usize];
        file.read_exact_at(&mut buf, start)?;
        read += buf.len() as u64;
        let chunk = buf.len();
        buf.extend_from_slice(&carry);
        let mut upto = chunk;
        while let Some(nl) = buf[..upto].iter().rposition(|b| *b == b'\n') {
            let line = start + nl as u64 + 1;
            if line < len
                && let Some(at) = count.visit(line, &buf[nl + 1..])
            {
                return Ok((at, read));
            }
            upto = nl;
        }
        buf.truncate(HEADER_MAX.min(buf.len()));
        carry = buf;
        pos = start;
    }
    // The file's first line.
    if len > 0
        && let Some(at) = count.visit(0, &carry)
    {
        return Ok((at, read));
    }
    Ok((0, read))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn start(content: &str, n: u64) -> u64 {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(content.as_bytes()).unwrap();
        start_of_last(&f, content.len() as u64, n).unwrap().0
    }

    #[test]
    fn lines_counted_from_the_end() {
        let log = "t stdout F a\nt stdout P b\nt stdout F c\nnot cri\nt stderr F d\n";
        let at = |n| &log[start(log, n) as usize..];
        assert_eq!(at(0), "");
        assert_eq!(at(1), "t stderr F d\n");
        assert_eq!(at(2), "not cri\nt stderr F d\n");
        assert_eq!(at(3), "t stdout P b\nt stdout F c\nnot cri\nt stderr F d\n");
        assert_eq!(at(4), log);
        assert_eq!(at(99), log);
        assert_eq!(start("", 3), 0);
        // An unfinished line at the end is one; so is a last line without its newline.
        let log = "t stdout F a\nt stdout F b\nt stdout P c";
        assert_eq!(&log[start(log, 1) as usize..], "t stdout P c");
        let log = "t stdout F a\nt stdout P b\nt stdout P c\n";
        assert_eq!(&log[start(log, 1) as usize..], "t stdout P b\nt stdout P c\n");
    }

    #[test]
    fn heads_across_chunk_boundaries() {
        // Lines of every length around the chunk size, so that heads fall on both sides of a boundary.
        for pad in [0, 1, 5, 20, 100] {
            let mut log = String::new();
            let mut starts = Vec::new();
            for i in 0..40 {
                starts.push(log.len() as u64);
                let tag = if i % 3 == 1 { "P" } else { "F" };
                log += &format!("t stdout {tag} {}\n", "x".repeat(CHUNK / 7 + pad + i));
            }
            // Lines end at records 0, 2, 3, 5, 6, 8, ...: the last line starts at record 39's start.
            assert_eq!(start(&log, 1), starts[39]);
            assert_eq!(start(&log, 2), starts[37]);
            assert_eq!(start(&log, 3), starts[36]);
        }
    }
}
