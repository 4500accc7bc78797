//! Frames.
