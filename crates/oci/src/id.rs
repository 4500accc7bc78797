//! Container ids: they name a directory under the runtime root, so they must never leave it.

use crate::{Error, Result};

/// Checks that `id` is a safe, non-empty name: letters, digits, `-`, `_`, `.`, `+`, no `.`/`..`, at most 1024 bytes.
pub fn validate(id: &str) -> Result<()> {
    let bad = |reason| {
        Err(Error::InvalidId {
            id: id.to_string(),
            reason,
        })
    };
    if id.is_empty() {
        return bad("it is empty");
    }
    if id.len() > 1024 {
        return bad("it is longer than 1024 bytes");
    }
    if id == "." || id == ".." {
        return bad("it is a relative path component");
    }
    if id.contains('/') {
        return bad("it contains '/'");
    }
    if !id
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"-_.+".contains(&b))
    {
        return bad("only letters, digits, '-', '_', '.' and '+' are allowed");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::validate;

    #[test]
    fn accepts_usual_ids() {
        for id in ["a", "abc-123", "pod_1.ctr+2", &"f".repeat(64)] {
            validate(id).unwrap();
        }
    }

    #[test]
    fn refuses_escaping_ids() {
        for id in [
            "",
            ".",
            "..",
            "a/b",
            "../x",
            "/abs",
            "a b",
            "x\0y",
            &"a".repeat(1025),
        ] {
            let e = validate(id).unwrap_err().to_string();
            assert!(e.contains("invalid container id"), "{e}");
        }
    }
}
