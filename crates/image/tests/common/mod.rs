//! What the hostile-input tests of this crate share.

pub mod alloc;
