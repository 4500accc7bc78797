//! The name rules of the API server's validation: RFC 1123 labels and subdomains, port names (IANA service
//! names), label keys and values, ConfigMap and Secret keys. Each check answers with the rule it broke, in
//! words, for the `Invalid value` message.

/// A lowercase RFC 1123 label (container, volume, namespace names); Some(rule) when `s` is not one.
pub(super) fn label(s: &str) -> Option<&'static str> {
    (!is_label(s, 63)).then_some(
        "a lowercase RFC 1123 label: at most 63 lowercase letters, digits and '-', starting and ending with a \
         letter or digit (e.g. 'my-name')",
    )
}

/// A lowercase RFC 1123 subdomain (pod, workload, ConfigMap and Secret names); Some(rule) when not one.
pub(super) fn subdomain(s: &str) -> Option<&'static str> {
    let ok = s.len() <= 253 && s.split('.').all(|l| is_label(l, 253));
    (!ok).then_some(
        "a lowercase RFC 1123 subdomain: at most 253 characters, lowercase letters, digits, '-' and '.', starting \
         and ending with a letter or digit (e.g. 'example.com')",
    )
}

/// A port name (an IANA service name); Some(rule) when not one.
pub(super) fn port(s: &str) -> Option<&'static str> {
    let ok = (1..=15).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && s.bytes().any(|b| b.is_ascii_lowercase())
        && !s.starts_with('-')
        && !s.ends_with('-')
        && !s.contains("--");
    (!ok).then_some(
        "a port name: at most 15 lowercase letters, digits and '-', with at least one letter, no '--', not \
         starting or ending with '-' (e.g. 'http')",
    )
}

/// A label or annotation key: an optional subdomain prefix and '/', then a name; Some(rule) when not one.
pub(super) fn label_key(s: &str) -> Option<&'static str> {
    let (prefix, name) = s.rsplit_once('/').unwrap_or(("", s));
    let ok = (prefix.is_empty() && !s.contains('/') || subdomain(prefix).is_none())
        && !name.is_empty()
        && is_qualified_name(name);
    (!ok).then_some(
        "a label key: a name of at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter \
         or digit, with an optional DNS subdomain prefix and '/' (e.g. 'example.com/my-key')",
    )
}

/// A label value; Some(rule) when not one.
pub(super) fn label_value(s: &str) -> Option<&'static str> {
    (!(s.is_empty() || is_qualified_name(s))).then_some(
        "a label value: empty, or at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter \
         or digit",
    )
}

/// A ConfigMap or Secret key; Some(rule) when not one.
pub(super) fn config_key(s: &str) -> Option<&'static str> {
    let ok = !s.is_empty()
        && s.len() <= 253
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b))
        && s != "."
        && !s.starts_with("..");
    (!ok).then_some(
        "a valid config key: letters, digits, '-', '_' or '.', not '.' and not starting with '..' (e.g. \
         'key.name')",
    )
}

fn is_label(s: &str, max: usize) -> bool {
    let b = s.as_bytes();
    let alnum = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    !b.is_empty()
        && b.len() <= max
        && b.iter().all(|c| alnum(c) || *c == b'-')
        && alnum(&b[0])
        && alnum(&b[b.len() - 1])
}

fn is_qualified_name(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter().all(|c| c.is_ascii_alphanumeric() || b"-_.".contains(c))
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_as_the_api_server_reads_them() {
        for ok in ["a", "app", "my-app-2", "0abc"] {
            assert!(label(ok).is_none(), "{ok}");
        }
        for bad in ["", "App", "my_app", "-a", "a-", "a.b", &"a".repeat(64)] {
            assert!(label(bad).is_some(), "{bad}");
        }
        for ok in ["myapp", "my.app-1", "a.b.c"] {
            assert!(subdomain(ok).is_none(), "{ok}");
        }
        for bad in ["", "My", "a..b", ".a", "a.", "a_b", &"a".repeat(254)] {
            assert!(subdomain(bad).is_some(), "{bad}");
        }
        for ok in ["http", "web-1", "a1"] {
            assert!(port(ok).is_none(), "{ok}");
        }
        for bad in ["", "80", "HTTP", "a--b", "-a", "a-", "abcdefghijklmnop"] {
            assert!(port(bad).is_some(), "{bad}");
        }
        for ok in ["app", "app.kubernetes.io/name", "a_b.c", "example.com/x"] {
            assert!(label_key(ok).is_none(), "{ok}");
        }
        for bad in ["", "/a", "a/", "Bad_/x", "a/b/c", "-a", &"a".repeat(64)] {
            assert!(label_key(bad).is_some(), "{bad}");
        }
        for ok in ["", "v1.2", "my_value", "A"] {
            assert!(label_value(ok).is_none(), "{ok}");
        }
        for bad in ["bad value", "-a", "a-", &"a".repeat(64)] {
            assert!(label_value(bad).is_some(), "{bad}");
        }
        for ok in ["fluent-bit.conf", "A_B", ".hidden"] {
            assert!(config_key(ok).is_none(), "{ok}");
        }
        for bad in ["", ".", "..x", "a/b", "a b"] {
            assert!(config_key(bad).is_some(), "{bad}");
        }
    }
}
