//! Image references as a container runtime reads them: `busybox` is `docker.io/library/busybox:latest`,
//! `quay.io/x/y@sha256:…` names a manifest, and a tag and a digest may come together (the digest wins).

use oci_client::Reference;

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

/// Parses `reference` with the registry client's grammar.
pub fn parse(reference: &str) -> Result<Reference> {
    if reference.is_empty() || reference.trim() != reference {
        return Err(Error::InvalidArgument(format!(
            "image reference {reference:?}: empty or surrounded by spaces"
        )));
    }
    reference
        .parse::<Reference>()
        .map_err(|e| Error::InvalidArgument(format!("image reference {reference:?}: {e}")))
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

    #[test]
    fn repo_of_strips_tag_or_digest_not_port() {
        assert_eq!(repo_of("127.0.0.1:5000/a:v1"), "127.0.0.1:5000/a");
        assert_eq!(repo_of("127.0.0.1:5000/a"), "127.0.0.1:5000/a");
        assert_eq!(repo_of("docker.io/library/b@sha256:00"), "docker.io/library/b");
    }
}
