//! Kubernetes resource quantities (`500m`, `1.5`, `512Mi`, `1G`, `2e3`) as the integers the CRI wants:
//! milli-CPUs and bytes, rounded up as the API server does.

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// A quantity as an exact fraction: `num / 10^scale`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Exact {
    num: u128,
    scale: u32,
}

/// Why a quantity could not be read. Its own small type, as `ParseIntError` is: the caller knows which
/// container or volume the quantity belongs to and says so in its [`crate::Error`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadQuantity {
    /// It is not a quantity.
    #[error("bad quantity {0:?} (examples: 500m, 1.5, 512Mi, 1G)")]
    Malformed(String),
    /// It has more decimal places than can be counted.
    #[error("quantity too precise")]
    TooPrecise,
    /// It does not fit 64 bits in the unit asked for.
    #[error("quantity too large")]
    TooLarge,
}

/// Parses `q`; the error names the quantity.
fn parse(q: &str) -> Result<Exact, BadQuantity> {
    let bad = || BadQuantity::Malformed(q.to_string());
    let s = q.trim();
    let end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(end);
    let number = number.strip_prefix('+').unwrap_or(number);
    let (int, frac) = number.split_once('.').unwrap_or((number, ""));
    if int.is_empty() && frac.is_empty() || !int.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let digits = format!("{int}{frac}");
    let mut num: u128 = digits.parse().map_err(|_| bad())?;
    let mut scale = frac.len() as u32;
    let (mul, exp10): (u128, i32) = match suffix {
        "" => (1, 0),
        "m" => (1, -3),
        "k" => (1, 3),
        "M" => (1, 6),
        "G" => (1, 9),
        "T" => (1, 12),
        "P" => (1, 15),
        "E" => (1, 18),
        "Ki" => (1 << 10, 0),
        "Mi" => (1 << 20, 0),
        "Gi" => (1 << 30, 0),
        "Ti" => (1 << 40, 0),
        "Pi" => (1 << 50, 0),
        "Ei" => (1 << 60, 0),
        s if s.starts_with(['e', 'E']) => (1, s[1..].parse::<i32>().map_err(|_| bad())?),
        _ => return Err(bad()),
    };
    num = num.checked_mul(mul).ok_or_else(bad)?;
    if exp10 >= 0 {
        num = num
            .checked_mul(10u128.checked_pow(exp10 as u32).ok_or_else(bad)?)
            .ok_or_else(bad)?;
    } else {
        scale += exp10.unsigned_abs();
    }
    Ok(Exact { num, scale })
}

fn ceil_times(e: Exact, factor: u128) -> Result<u64, BadQuantity> {
    let div = 10u128.checked_pow(e.scale).ok_or(BadQuantity::TooPrecise)?;
    let n = e.num.checked_mul(factor).ok_or(BadQuantity::TooLarge)?;
    u64::try_from(n.div_ceil(div)).map_err(|_| BadQuantity::TooLarge)
}

/// CPU in milli-CPUs (`500m` → 500, `1.5` → 1500), rounded up.
pub fn milli_cpu(q: &Quantity) -> Result<u64, BadQuantity> {
    ceil_times(parse(&q.0)?, 1000)
}

/// An amount in its base unit (`512Mi` → 536870912 bytes), rounded up.
pub fn value(q: &Quantity) -> Result<u64, BadQuantity> {
    ceil_times(parse(&q.0)?, 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> Quantity {
        Quantity(s.into())
    }

    #[test]
    fn cpu_and_memory_forms() {
        assert_eq!(milli_cpu(&q("500m")).unwrap(), 500);
        assert_eq!(milli_cpu(&q("1")).unwrap(), 1000);
        assert_eq!(milli_cpu(&q("1.5")).unwrap(), 1500);
        assert_eq!(milli_cpu(&q("0.1")).unwrap(), 100);
        assert_eq!(milli_cpu(&q("1m")).unwrap(), 1);
        assert_eq!(milli_cpu(&q("0.0001")).unwrap(), 1, "rounded up");
        assert_eq!(value(&q("512Mi")).unwrap(), 512 << 20);
        assert_eq!(value(&q("1Gi")).unwrap(), 1 << 30);
        assert_eq!(value(&q("128M")).unwrap(), 128_000_000);
        assert_eq!(value(&q("1.5Gi")).unwrap(), 3 << 29);
        assert_eq!(value(&q("2e3")).unwrap(), 2000);
        assert_eq!(value(&q("100k")).unwrap(), 100_000);
        assert_eq!(value(&q("1500m")).unwrap(), 2, "a fraction of a byte rounds up");
        assert_eq!(value(&q("1e30")), Err(BadQuantity::TooLarge));
        assert_eq!(value(&q("1e-40")), Err(BadQuantity::TooPrecise));
    }

    #[test]
    fn bad_quantities_are_named() {
        for bad in ["", "abc", "1x", "Mi", "1..2", "-1"] {
            let e = value(&q(bad)).unwrap_err().to_string();
            assert!(e.contains(&format!("{bad:?}")), "{e}");
        }
    }
}
