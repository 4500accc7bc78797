//! Image references as a container runtime reads them: `busybox` is `docker.io/library/busybox:latest`,
//! `quay.io/x/y@sha256:…` names a manifest, and a tag and a digest may come together (the digest wins).

use oci_client::{ParseError, Reference};

use crate::{Error, Result};

/// A parsed, normalised reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Named {
    /// `registry/repository`, e.g. `docker.io/library/busybox`.
    pub repo: String,
    /// The tag; `latest` when neither a tag nor a digest was given.
    pub tag: Option<String>,
    /// `sha256:…` of the manifest, when given.
    pub digest: Option<String>,
}

impl Named {
    /// `repo:tag`, the name an image is listed under (`None` for a digest-only reference).
    pub fn tagged(&self) -> Option<String> {
        self.tag.as_ref().map(|t| format!("{}:{t}", self.repo))
    }

    /// `repo@digest`, for the given manifest digest.
    pub fn with_digest(&self, digest: &str) -> String {
        format!("{}@{digest}", self.repo)
    }
}

/// Parses `reference` with the registry client's grammar (Docker's reference grammar, as
/// `oci_client::Reference`'s `FromStr` reads it, with its answers and errors), by hand: that parser's regex costs
/// ~5 MiB compiled and 2.6 MiB of match cache per thread that ever used it, which criusd kept for good after its
/// first pull or import. Tags are read as that regex reads `\w`, except that non-ASCII tags take the Unicode
/// letters and numbers (`char::is_alphanumeric`), not its marks and connector punctuation.
pub fn parse(reference: &str) -> Result<Reference> {
    if reference.is_empty() || reference.trim() != reference {
        return Err(Error::InvalidArgument(format!(
            "image reference {reference:?}: empty or surrounded by spaces"
        )));
    }
    grammar(reference).map_err(|e| Error::InvalidArgument(format!("image reference {reference:?}: {e}")))
}

/// The longest repository (after the registry is split off).
const NAME_MAX: usize = 255;

/// `name[:tag][@digest]`, where `name` is `[domain/]path`.
fn grammar(s: &str) -> std::result::Result<Reference, ParseError> {
    if s.is_empty() {
        return Err(ParseError::NameEmpty);
    }
    let (left, digest) = match s.split_once('@') {
        Some((l, d)) => (l, Some(d)),
        None => (s, None),
    };
    // A ':' after the last '/' starts the tag; one before the first '/' is a registry's port.
    let after_slash = left.rfind('/').map_or(0, |i| i + 1);
    let (name, tag) = match left[after_slash..].find(':') {
        Some(i) => (&left[..after_slash + i], Some(&left[after_slash + i + 1..])),
        None => (left, None),
    };
    let valid = valid_name(name) && tag.is_none_or(valid_tag) && digest.is_none_or(valid_digest);
    if !valid {
        return Err(ParseError::ReferenceInvalidFormat);
    }
    let (registry, repository) = split_domain(name);
    if repository.len() > NAME_MAX {
        return Err(ParseError::NameTooLong);
    }
    if let Some(d) = digest {
        let (algorithm, hex) = d.split_once(':').ok_or(ParseError::DigestInvalidFormat)?;
        let want = match algorithm {
            "sha256" => 64,
            "sha384" => 96,
            "sha512" => 128,
            _ => return Err(ParseError::DigestUnsupported),
        };
        if hex.len() != want {
            return Err(ParseError::DigestInvalidLength);
        }
    }
    Ok(match (tag, digest) {
        (Some(t), Some(d)) => Reference::with_tag_and_digest(registry, repository, t.into(), d.into()),
        (None, Some(d)) => Reference::with_digest(registry, repository, d.into()),
        (t, None) => Reference::with_tag(registry, repository, t.unwrap_or("latest").into()),
    })
}

/// `[domain/]path`: the part before the first '/' may be a registry (`host[.host...][:port]`).
fn valid_name(name: &str) -> bool {
    valid_path(name)
        || name
            .split_once('/')
            .is_some_and(|(d, p)| valid_domain(d) && valid_path(p))
}

/// `host(.host)*(:port)?`, each host label alphanumeric with inner '-'.
fn valid_domain(d: &str) -> bool {
    let (hosts, port) = match d.split_once(':') {
        Some((h, p)) => (h, Some(p)),
        None => (d, None),
    };
    let label = |l: &str| {
        let b = l.as_bytes();
        !b.is_empty()
            && b[0].is_ascii_alphanumeric()
            && b[b.len() - 1].is_ascii_alphanumeric()
            && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'-')
    };
    hosts.split('.').all(label) && port.is_none_or(|p| !p.is_empty() && p.bytes().all(|c| c.is_ascii_digit()))
}

/// Components joined by '/', each lowercase alphanumeric runs joined by '.', '_', '__' or any number of '-'.
fn valid_path(p: &str) -> bool {
    p.split('/').all(|c| {
        let b = c.as_bytes();
        let alnum = |x: &u8| x.is_ascii_lowercase() || x.is_ascii_digit();
        if b.is_empty() || !alnum(&b[0]) || !alnum(&b[b.len() - 1]) {
            return false;
        }
        let mut i = 0;
        while i < b.len() {
            if alnum(&b[i]) {
                i += 1;
                continue;
            }
            let start = i;
            while i < b.len() && !alnum(&b[i]) {
                i += 1;
            }
            let sep = &c[start..i];
            let ok = sep == "." || sep == "_" || sep == "__" || sep.bytes().all(|x| x == b'-');
            if !ok {
                return false;
            }
        }
        true
    })
}

/// A word character as the regex's Unicode `\w` reads it (see [`parse`]).
fn word(c: char) -> bool {
    c == '_' || c.is_alphanumeric()
}

/// A word character, then up to 127 of word characters, '.' and '-'.
fn valid_tag(t: &str) -> bool {
    let mut chars = t.chars();
    chars.next().is_some_and(word)
        && t.chars().count() <= 128
        && chars.all(|c| word(c) || c == '.' || c == '-')
}

/// `algorithm:hex`: the algorithm's parts letters then alphanumerics, joined by one of `-_+.`; 32 hex digits or
/// more.
fn valid_digest(d: &str) -> bool {
    let Some((algorithm, hex)) = d.split_once(':') else {
        return false;
    };
    let part = |p: &str| {
        let b = p.as_bytes();
        !b.is_empty() && b[0].is_ascii_alphabetic() && b.iter().all(u8::is_ascii_alphanumeric)
    };
    algorithm.split(['-', '_', '+', '.']).all(part)
        && hex.len() >= 32
        && hex.bytes().all(|c| c.is_ascii_hexdigit())
}

/// The registry and repository of a valid `name`, as Docker splits them: the first component is a registry
/// when it has a '.' or ':' or is `localhost`; else Docker Hub, where a single name is under `library/`.
fn split_domain(name: &str) -> (String, String) {
    let (mut domain, mut rest) = match name.split_once('/') {
        Some((d, r)) if d.contains(['.', ':']) || d == "localhost" => (d.to_string(), r.to_string()),
        _ => ("docker.io".to_string(), name.to_string()),
    };
    if domain == "index.docker.io" {
        domain = "docker.io".into();
    }
    if domain == "docker.io" && !rest.contains('/') {
        rest = format!("library/{rest}");
    }
    (domain, rest)
}

/// Normalises `reference`: default registry `docker.io`, `library/` for single-name Docker Hub images,
/// and `latest` when there is neither tag nor digest.
pub fn normalize(reference: &str) -> Result<Named> {
    let r = parse(reference)?;
    let digest = r.digest().map(str::to_string);
    let tag = match (r.tag(), &digest) {
        (Some(t), _) => Some(t.to_string()),
        (None, Some(_)) => None,
        (None, None) => Some("latest".to_string()),
    };
    Ok(Named {
        repo: format!("{}/{}", r.registry(), r.repository()),
        tag,
        digest,
    })
}

/// `repo` of a stored name: `repo:tag` or `repo@digest`.
pub(crate) fn repo_of(name: &str) -> &str {
    if let Some((repo, _)) = name.split_once('@') {
        return repo;
    }
    match name.rfind(':') {
        Some(i) if !name[i..].contains('/') => &name[..i],
        _ => name,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalises_like_docker() {
        let n = normalize("busybox").unwrap();
        assert_eq!(n.tagged().unwrap(), "docker.io/library/busybox:latest");
        let n = normalize("127.0.0.1:5000/a/b:v1").unwrap();
        assert_eq!(n.tagged().unwrap(), "127.0.0.1:5000/a/b:v1");
        let d = format!("sha256:{}", "ab".repeat(32));
        let n = normalize(&format!("quay.io/x/y@{d}")).unwrap();
        assert_eq!((n.tag, n.digest.as_deref()), (None, Some(d.as_str())));
        assert_eq!(n.repo, "quay.io/x/y");
        assert!(matches!(normalize("Not Valid"), Err(Error::InvalidArgument(m)) if m.contains("Not Valid")));
        assert!(normalize("").is_err());
    }

    /// The hand-written grammar answers as the registry client's regex parser does: the same registry,
    /// repository, tag and digest, or the same error, for known cases and for 10000 generated strings.
    #[test]
    fn the_grammar_reads_references_as_the_registry_clients_parser_does() {
        let same = |s: &str| {
            let mine = grammar(s).map(|r| (r.registry().to_string(), r.repository().to_string()));
            let theirs = s
                .parse::<Reference>()
                .map(|r| (r.registry().to_string(), r.repository().to_string()));
            assert_eq!(mine, theirs, "{s:?}");
            if let (Ok(a), Ok(b)) = (grammar(s), s.parse::<Reference>()) {
                assert_eq!((a.tag(), a.digest()), (b.tag(), b.digest()), "{s:?}");
            }
        };
        let hex64 = "f".repeat(64);
        for s in [
            "busybox",
            "test.com:tag",
            "test.com:5000",
            "test:5000/repo",
            "test:5000/repo:tag",
            "localhost/x",
            "localhost:5000",
            "index.docker.io/busybox",
            "Uppercase/lowercase:tag",
            "Uppercase:tag",
            "test:5000/Uppercase/lowercase:tag",
            "aa/asdf$$^/aa",
            "a__b/c--d/e.f/g_h:v1.2-3_4",
            "a___b",
            "a_-b",
            "a-.b",
            "-a",
            "a-",
            "a/",
            "/a",
            "a//b",
            ":tag",
            "@sha256:0",
            "b.gcr.io/test.example.com/my-app:test.example.com",
            "xn--n3h.com/myimage:xn--n3h.com",
            "x:été",
            "x:_x",
            "x:.x",
            "-x.com/y",
            "x-.com/y",
            "x.com:/y",
            "x.com:50a/y",
            "x@y@z",
        ] {
            same(s);
        }
        for s in [
            format!("repo@sha256:{hex64}"),
            format!("repo:tag@sha256:{hex64}"),
            format!("repo@sha512:{hex64}"),
            format!("repo@md5:{hex64}"),
            format!("repo@sha256:{}", &hex64[..40]),
            format!("repo@sha256+b64.x-y_z:{hex64}"),
            format!("repo@1sha:{hex64}"),
            format!("repo:{}", "t".repeat(128)),
            format!("repo:{}", "t".repeat(129)),
            "a".repeat(256),
            format!("x/{}", "a".repeat(250)),
            format!("x/{}", "a".repeat(246)),
        ] {
            same(&s);
        }
        // Generated: pieces of references and noise, joined at random (a fixed-seed generator).
        let pieces = [
            "a",
            "b0",
            "Z",
            "9",
            ".",
            "_",
            "__",
            "-",
            "--",
            "/",
            ":",
            "@",
            "5000",
            "com",
            "localhost",
            "sha256:",
            "sha512:",
            "ff",
            "é",
            "$",
            " ",
            "docker.io",
            "index.docker.io",
            "library",
        ];
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = |n: usize| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % n as u64) as usize
        };
        for _ in 0..10_000 {
            let mut s = String::new();
            for _ in 0..1 + next(8) {
                s.push_str(pieces[next(pieces.len())]);
            }
            if next(6) == 0 {
                s.push_str(&format!("@sha256:{}", &hex64[..58 + next(7)]));
            }
            same(&s);
        }
    }

    #[test]
    fn repo_of_strips_tag_or_digest_not_port() {
        assert_eq!(repo_of("127.0.0.1:5000/a:v1"), "127.0.0.1:5000/a");
        assert_eq!(repo_of("127.0.0.1:5000/a"), "127.0.0.1:5000/a");
        assert_eq!(repo_of("docker.io/library/b@sha256:00"), "docker.io/library/b");
    }
}
