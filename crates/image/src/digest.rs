//! `sha256:<64 hex>` digests: parsed strictly, so a digest can name a file without escaping its directory.

use std::fmt;

use sha2::{Digest as _, Sha256};

use crate::{Error, Result};

/// A sha256 content digest.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(transparent)]
pub struct Digest(String);

impl<'de> serde::Deserialize<'de> for Digest {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Digest::parse(&s).map_err(serde::de::Error::custom)
    }
}

impl Digest {
    /// Parses `sha256:<64 lowercase hex>`; anything else is InvalidArgument naming the input.
    pub fn parse(s: &str) -> Result<Digest> {
        let hex = s
            .strip_prefix("sha256:")
            .ok_or_else(|| bad(s, "only sha256 digests are supported"))?;
        if hex.len() != 64
            || !hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        {
            return Err(bad(s, "expected 64 lowercase hex digits"));
        }
        Ok(Digest(s.to_string()))
    }

    /// The digest of `bytes`.
    pub fn of(bytes: &[u8]) -> Digest {
        Digest(format!("sha256:{:x}", Sha256::digest(bytes)))
    }

    /// The digest of a finished hasher.
    pub fn from_hasher(h: Sha256) -> Digest {
        Digest(format!("sha256:{:x}", h.finalize()))
    }

    /// The hex part (a safe file name).
    pub fn hex(&self) -> &str {
        &self.0[7..]
    }

    /// The full `sha256:…` form.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

fn bad(s: &str, why: &str) -> Error {
    Error::InvalidArgument(format!("digest {s:?}: {why}"))
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_only_safe_digests() {
        let d = Digest::of(b"abc");
        assert_eq!(
            d.as_str(),
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(Digest::parse(d.as_str()).unwrap(), d);
        for bad in [
            "sha256:../../etc",
            "md5:abc",
            "sha256:ABC",
            &format!("{d}0"),
            "sha256:",
        ] {
            assert!(Digest::parse(bad).is_err(), "{bad}");
        }
    }
}
