//! A signature policy in the containers-policy.json format (the file CRI-O and podman read): which images a
//! pull accepts, by the most specific scope of the `docker` transport that matches the reference (`host/repo:tag`,
//! `host/repo`, each namespace above it, `host`, then `default`). Every requirement of the scope must hold:
//!
//! - `insecureAcceptAnything`: any image;
//! - `reject`: none;
//! - `sigstoreSigned` with `keyPath` or `keyData` (an ECDSA P-256 public key in PEM): a cosign signature of the
//!   manifest, stored tag-based (`<repo>:sha256-<hex>.sig`), made with that key, whose payload names the
//!   manifest digest and an identity `signedIdentity` accepts (`matchRepoDigestOrExact`, the default,
//!   `matchRepository`, or `matchExact`).
//!
//! Other requirement types (`signedBy`, GPG) and other identity kinds are refused when the file is read, so a
//! policy never means less than it says. Checking happens before any layer is fetched (`pull.rs`), in
//! `signature.rs`. Crates: ring (already in the workspace, for the test token issuer) verifies ECDSA; base64
//! reads PEM and the signature annotation.

use std::collections::BTreeMap;
use std::path::Path;

use base64::Engine as _;
use serde_json::Value;

use crate::{Error, Result};

/// What a signature's identity must be to match the reference pulled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Identity {
    /// By digest: the repository; by tag: the repository and tag (containers/image's default).
    MatchRepoDigestOrExact,
    /// The repository, whatever the tag.
    MatchRepository,
    /// Exactly the reference.
    MatchExact,
}

/// One requirement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Requirement {
    /// Accepts anything.
    InsecureAcceptAnything,
    /// Accepts nothing.
    Reject,
    /// A cosign signature by this key (the uncompressed P-256 point) whose identity matches.
    SigstoreSigned {
        /// The public key's point, as ring takes it.
        key: Vec<u8>,
        /// How the signed identity must match.
        identity: Identity,
    },
}

/// A policy: requirements by scope of the `docker` transport, and the default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    default: Vec<Requirement>,
    docker: BTreeMap<String, Vec<Requirement>>,
}

/// The DER prefix of a P-256 SubjectPublicKeyInfo: the key's uncompressed point (65 bytes) follows.
const P256_SPKI_PREFIX: [u8; 26] = [
    0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a, 0x86,
    0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
];

/// The point of the P-256 public key in PEM `pem`.
pub fn p256_public_key(pem: &str, what: &str) -> Result<Vec<u8>> {
    let body: String = pem
        .lines()
        .map(str::trim)
        .filter(|l| !l.starts_with("-----"))
        .collect();
    let der = base64::engine::general_purpose::STANDARD
        .decode(body)
        .map_err(|e| Error::InvalidArgument(format!("{what}: not a PEM public key: {e}")))?;
    match der.strip_prefix(&P256_SPKI_PREFIX[..]) {
        Some(point) if point.len() == 65 && point[0] == 4 => Ok(point.to_vec()),
        _ => Err(Error::InvalidArgument(format!(
            "{what}: only ECDSA P-256 public keys (cosign's) are supported"
        ))),
    }
}

fn requirement(v: &Value, base: &Path, what: &str) -> Result<Requirement> {
    let bad = |why: String| Error::InvalidArgument(format!("{what}: {why}"));
    match v["type"].as_str().unwrap_or_default() {
        "insecureAcceptAnything" => Ok(Requirement::InsecureAcceptAnything),
        "reject" => Ok(Requirement::Reject),
        "sigstoreSigned" => {
            let pem = match (v["keyPath"].as_str(), v["keyData"].as_str()) {
                (Some(p), None) => {
                    let p = base.join(p);
                    std::fs::read_to_string(&p).map_err(|e| bad(format!("keyPath {}: {e}", p.display())))?
                }
                (None, Some(d)) => {
                    let raw = base64::engine::general_purpose::STANDARD
                        .decode(d)
                        .map_err(|e| bad(format!("keyData is not base64: {e}")))?;
                    String::from_utf8(raw).map_err(|_| bad("keyData is not a PEM key".into()))?
                }
                _ => return Err(bad("sigstoreSigned needs one of keyPath and keyData".into())),
            };
            let identity = match v["signedIdentity"]["type"].as_str() {
                None | Some("matchRepoDigestOrExact") => Identity::MatchRepoDigestOrExact,
                Some("matchRepository") => Identity::MatchRepository,
                Some("matchExact") => Identity::MatchExact,
                Some(t) => return Err(bad(format!("signedIdentity {t:?} is not supported"))),
            };
            Ok(Requirement::SigstoreSigned {
                key: p256_public_key(&pem, what)?,
                identity,
            })
        }
        t => Err(bad(format!(
            "requirement type {t:?} is not supported (insecureAcceptAnything, reject, sigstoreSigned)"
        ))),
    }
}

fn requirements(v: &Value, base: &Path, what: &str) -> Result<Vec<Requirement>> {
    let list = v.as_array().filter(|l| !l.is_empty()).ok_or_else(|| {
        Error::InvalidArgument(format!("{what}: a non-empty list of requirements is needed"))
    })?;
    list.iter().map(|r| requirement(r, base, what)).collect()
}

impl Policy {
    /// Reads the policy file at `path` (a `keyPath` is relative to its directory).
    pub fn load(path: &Path) -> Result<Policy> {
        let what = format!("signature policy {}", path.display());
        let text = crate::bounded::read_capped(path, crate::bounded::MAX_MANIFEST, &what)?;
        let v: Value =
            serde_json::from_slice(&text).map_err(|e| Error::InvalidArgument(format!("{what}: {e}")))?;
        Policy::parse(&v, path.parent().unwrap_or(Path::new("/")), &what)
    }

    /// The policy `v` says; `base` is where relative key paths start, `what` names it in errors.
    pub fn parse(v: &Value, base: &Path, what: &str) -> Result<Policy> {
        let default = requirements(&v["default"], base, &format!("{what}: default"))?;
        let mut docker = BTreeMap::new();
        if let Some(t) = v["transports"].as_object() {
            for (name, scopes) in t {
                if name != "docker" {
                    // Other transports (oci-archive, dir, ...) are not what a pull uses.
                    continue;
                }
                for (scope, reqs) in scopes.as_object().into_iter().flatten() {
                    let r = requirements(reqs, base, &format!("{what}: docker scope {scope:?}"))?;
                    docker.insert(scope.clone(), r);
                }
            }
        }
        Ok(Policy { default, docker })
    }

    /// The requirements for `repo` (`host/path`, as normalized) pulled by `tag` (or by digest, None): those
    /// of the most specific scope that matches.
    pub fn requirements_for(&self, repo: &str, tag: Option<&str>) -> &[Requirement] {
        if let Some(r) = tag.and_then(|t| self.docker.get(&format!("{repo}:{t}"))) {
            return r;
        }
        let mut scope = repo;
        loop {
            if let Some(r) = self.docker.get(scope) {
                return r;
            }
            match scope.rsplit_once('/') {
                Some((up, _)) => scope = up,
                None => return &self.default,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const PEM: &str = "-----BEGIN PUBLIC KEY-----\n\
        MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEWnvn2pNLy9xT2Mba0S1A3qg/ls7e\n\
        fThkrfUsO0v+bxN7ORS0JDmW+EV/7X3S+TrZ2BAIKvU/6qmn2NvdJ3pc9w==\n\
        -----END PUBLIC KEY-----\n";

    #[test]
    fn the_most_specific_scope_decides() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("key.pub"), PEM).unwrap();
        let p = Policy::parse(
            &json!({
                "default": [{"type": "reject"}],
                "transports": {"docker": {
                    "reg.local": [{"type": "insecureAcceptAnything"}],
                    "reg.local/team": [{"type": "sigstoreSigned", "keyPath": "key.pub",
                        "signedIdentity": {"type": "matchRepository"}}],
                    "reg.local/team/app:dev": [{"type": "insecureAcceptAnything"}],
                }, "oci-archive": {"": [{"type": "reject"}]}}
            }),
            dir.path(),
            "p",
        )
        .unwrap();
        assert_eq!(
            p.requirements_for("docker.io/library/busybox", Some("1")),
            [Requirement::Reject]
        );
        assert_eq!(
            p.requirements_for("reg.local/other", None),
            [Requirement::InsecureAcceptAnything]
        );
        assert!(matches!(
            p.requirements_for("reg.local/team/app", Some("1")),
            [Requirement::SigstoreSigned { identity: Identity::MatchRepository, key }] if key.len() == 65
        ));
        assert_eq!(
            p.requirements_for("reg.local/team/app", Some("dev")),
            [Requirement::InsecureAcceptAnything]
        );
    }

    #[test]
    fn what_it_cannot_check_is_refused_when_read() {
        let base = Path::new("/");
        for (bad, says) in [
            (json!({}), "default"),
            (json!({"default": []}), "non-empty"),
            (
                json!({"default": [{"type": "signedBy", "keyType": "GPGKeys"}]}),
                "signedBy",
            ),
            (json!({"default": [{"type": "sigstoreSigned"}]}), "keyPath"),
            (
                json!({"default": [{"type": "sigstoreSigned", "keyData": "eA=="}]}),
                "not a PEM public key",
            ),
            (
                json!({"default": [{"type": "sigstoreSigned", "keyData": base64::engine::general_purpose::STANDARD
                    .encode("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n")}]}),
                "P-256",
            ),
            (
                json!({"default": [{"type": "sigstoreSigned", "keyPath": "/nonexistent.pub"}]}),
                "/nonexistent.pub",
            ),
        ] {
            let e = Policy::parse(&bad, base, "policy.json").unwrap_err().to_string();
            assert!(e.contains("policy.json") && e.contains(says), "{bad}: {e}");
        }
    }
}
