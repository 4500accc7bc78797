//! SPDY/3.1 as Kubernetes' streaming peers speak it (github.com/moby/spdystream): the frames and their
//! compressed header blocks ([`frame`]), and a session that multiplexes streams over one connection ([`conn`]).

mod codec;
pub mod conn;
mod dict;
pub mod frame;
mod headers;
mod session;
mod stream;
mod writer;
mod zlib;

#[cfg(test)]
mod spdystream_tests;
