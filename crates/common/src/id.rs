//! Random ids from the kernel's random source.

use std::io::Read;

/// `n` random bytes.
pub fn random_bytes(n: usize) -> std::io::Result<Vec<u8>> {
    let mut b = vec![0u8; n];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut b)?;
    Ok(b)
}

/// `n` random bytes as `2n` lowercase hex digits (sandbox and container ids are 32 bytes, 64 digits).
pub fn random_hex(n: usize) -> std::io::Result<String> {
    Ok(hex(&random_bytes(n)?))
}

/// `b` as lowercase hex.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_hex_of_the_asked_length_and_differ() {
        let (a, b) = (random_hex(32).unwrap(), random_hex(32).unwrap());
        assert_eq!(a.len(), 64);
        assert!(
            a.bytes()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
        );
        assert_ne!(a, b);
        assert_eq!(hex(&[0, 171, 255]), "00abff");
    }
}
