//! JSON written the way kubectl's Go encoder writes an unstructured object: keys sorted, `<`, `>` and `&`
//! escaped as `\u003c` and friends, integers as integers, and `MarshalIndent`'s layout (`"key": value`, empty
//! maps and lists kept as `{}` and `[]`). Also the text form jsonpath prints for a scalar.

use serde_json::{Number, Value};
use std::fmt::Write as _;

/// One line, no spaces: what `-o jsonpath` prints for a map or a list.
pub fn compact(v: &Value) -> String {
    let mut out = String::new();
    write(v, None, 0, &mut out);
    out
}

/// Indented with `indent` per level, as `json.MarshalIndent(v, "", indent)`.
pub fn indented(v: &Value, indent: &str) -> String {
    let mut out = String::new();
    write(v, Some(indent), 0, &mut out);
    out
}

fn newline(out: &mut String, indent: Option<&str>, depth: usize) {
    if let Some(ind) = indent {
        out.push('\n');
        for _ in 0..depth {
            out.push_str(ind);
        }
    }
}

fn write(v: &Value, indent: Option<&str>, depth: usize, out: &mut String) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&json_number(n)),
        Value::String(s) => string(s, out),
        Value::Array(items) if items.is_empty() => out.push_str("[]"),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                newline(out, indent, depth + 1);
                write(item, indent, depth + 1, out);
            }
            newline(out, indent, depth);
            out.push(']');
        }
        Value::Object(map) if map.is_empty() => out.push_str("{}"),
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                newline(out, indent, depth + 1);
                string(k, out);
                out.push(':');
                if indent.is_some() {
                    out.push(' ');
                }
                write(&map[k], indent, depth + 1, out);
            }
            newline(out, indent, depth);
            out.push('}');
        }
    }
}

/// A JSON string with Go's escapes (HTML-safe, U+2028/U+2029 escaped, other controls as `\u00XX`).
fn string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// A number as Go's encoder writes a float64 (`1e+21`, `1e-7`, otherwise plain decimals), integers as is.
fn json_number(n: &Number) -> String {
    match n.as_f64() {
        Some(f) if !(n.is_i64() || n.is_u64()) => {
            let a = f.abs();
            if a != 0.0 && !(1e-6..1e21).contains(&a) {
                exponent_form(f, 1)
            } else {
                format!("{f}")
            }
        }
        _ => n.to_string(),
    }
}

/// `1e+21`-style text with at least `min_exp_digits` exponent digits.
fn exponent_form(f: f64, min_exp_digits: usize) -> String {
    let s = format!("{f:e}");
    let (mantissa, exp) = s.split_once('e').unwrap_or((&s, "0"));
    let (sign, digits) = match exp.strip_prefix('-') {
        Some(d) => ('-', d),
        None => ('+', exp),
    };
    format!("{mantissa}e{sign}{digits:0>min_exp_digits$}")
}

/// The text jsonpath prints for a scalar, as Go's `fmt.Fprint`: strings raw, `true`, `<nil>` for null,
/// floats in `%v` form (`0.5`, `1e+06`).
pub fn scalar_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "<nil>".to_owned(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => match n.as_f64() {
            Some(f) if !(n.is_i64() || n.is_u64()) => {
                // Go's shortest %v takes the exponent form below 1e-4 and from 1e+06 on (`123456`, `1e+06`).
                let e = format!("{f:e}");
                let exp: i32 = e.split_once('e').and_then(|(_, x)| x.parse().ok()).unwrap_or(0);
                if f != 0.0 && !(-4..6).contains(&exp) {
                    exponent_form(f, 2)
                } else {
                    format!("{f}")
                }
            }
            _ => n.to_string(),
        },
        other => compact(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn compact_sorts_keys_and_escapes_like_go() {
        let v = json!({"requests": {"memory": "64Mi", "cpu": "250m"}, "limits": {"cpu": "500m"}});
        assert_eq!(
            compact(&v),
            r#"{"limits":{"cpu":"500m"},"requests":{"cpu":"250m","memory":"64Mi"}}"#
        );
        assert_eq!(
            compact(&json!("a<b>&c\n\u{1}")),
            r#""a\u003cb\u003e\u0026c\n\u0001""#
        );
        assert_eq!(
            compact(&json!([1, 2.5, true, null, [], {}])),
            "[1,2.5,true,null,[],{}]"
        );
    }

    #[test]
    fn indented_is_marshal_indent() {
        let v = json!({"b": [1, {"c": []}], "a": {}});
        let want = "{\n    \"a\": {},\n    \"b\": [\n        1,\n        {\n            \"c\": []\n        }\n    ]\n}";
        assert_eq!(indented(&v, "    "), want);
    }

    #[test]
    fn numbers_as_go_writes_them() {
        assert_eq!(compact(&json!(1e21)), "1e+21");
        assert_eq!(compact(&json!(1e-7)), "1e-7");
        assert_eq!(compact(&json!(1_000_000.0)), "1000000");
        assert_eq!(compact(&json!(-3)), "-3");
        assert_eq!(scalar_text(&json!(1_000_000.0)), "1e+06");
        assert_eq!(scalar_text(&json!(123_456.0)), "123456");
        assert_eq!(scalar_text(&json!(0.5)), "0.5");
        assert_eq!(scalar_text(&json!(0.00001)), "1e-05");
        assert_eq!(scalar_text(&json!(7)), "7");
        assert_eq!(scalar_text(&json!(null)), "<nil>");
        assert_eq!(scalar_text(&json!(false)), "false");
    }
}
