//! The zlib dictionary every SPDY/3 header block is compressed with (SPDY draft 3, section 2.6.10.1).
//!
//! It must match the peer's byte for byte: a zlib stream names its dictionary only by the Adler-32 of it, and a
//! single differing byte makes every header block undecodable.

/// The SPDY/3 header dictionary: length-prefixed (32-bit, big-endian) header names and common values, then a run
/// of status codes, reason phrases, dates and content types without prefixes.
pub const DICTIONARY: &[u8] = b"\
\0\0\0\x07options\0\0\0\x04head\0\0\0\x04post\0\0\0\x03put\0\0\0\x06delete\0\0\0\x05trace\
\0\0\0\x06accept\0\0\0\x0eaccept-charset\0\0\0\x0faccept-encoding\0\0\0\x0faccept-language\
\0\0\0\x0daccept-ranges\0\0\0\x03age\0\0\0\x05allow\0\0\0\x0dauthorization\0\0\0\x0dcache-control\
\0\0\0\x0aconnection\0\0\0\x0ccontent-base\0\0\0\x10content-encoding\0\0\0\x10content-language\
\0\0\0\x0econtent-length\0\0\0\x10content-location\0\0\0\x0bcontent-md5\0\0\0\x0dcontent-range\
\0\0\0\x0ccontent-type\0\0\0\x04date\0\0\0\x04etag\0\0\0\x06expect\0\0\0\x07expires\0\0\0\x04from\
\0\0\0\x04host\0\0\0\x08if-match\0\0\0\x11if-modified-since\0\0\0\x0dif-none-match\0\0\0\x08if-range\
\0\0\0\x13if-unmodified-since\0\0\0\x0dlast-modified\0\0\0\x08location\0\0\0\x0cmax-forwards\
\0\0\0\x06pragma\0\0\0\x12proxy-authenticate\0\0\0\x13proxy-authorization\0\0\0\x05range\
\0\0\0\x07referer\0\0\0\x0bretry-after\0\0\0\x06server\0\0\0\x02te\0\0\0\x07trailer\
\0\0\0\x11transfer-encoding\0\0\0\x07upgrade\0\0\0\x0auser-agent\0\0\0\x04vary\0\0\0\x03via\
\0\0\0\x07warning\0\0\0\x10www-authenticate\0\0\0\x06method\0\0\0\x03get\0\0\0\x06status\
\0\0\0\x06200 OK\0\0\0\x07version\0\0\0\x08HTTP/1.1\0\0\0\x03url\0\0\0\x06public\0\0\0\x0aset-cookie\
\0\0\0\x0akeep-alive\0\0\0\x06origin\
100101201202205206300302303304305306307402405406407408409410411412413414415416417502504505\
203 Non-Authoritative Information204 No Content301 Moved Permanently400 Bad Request401 Unauthorized\
403 Forbidden404 Not Found500 Internal Server Error501 Not Implemented503 Service Unavailable\
Jan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec 00:00:00 Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMT\
chunked,text/html,image/png,image/jpg,image/gif,application/xml,application/xhtml+xml,text/plain,\
text/javascript,publicprivatemax-age=gzip,deflate,sdchcharset=utf-8charset=iso-8859-1,utf-,*,enq=0.";
