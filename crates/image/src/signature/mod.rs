//! Checking a pull against a [`Policy`] before any layer is fetched: the manifest digest the reference
//! resolved to must satisfy every requirement of the reference's scope. A cosign signature is looked up where
//! cosign stores one: tag-based (`<repo>:sha256-<hex>.sig`), and as an OCI 1.1 referrer of the image (a
//! manifest whose `subject` is the image, of artifact type [`referrers::COSIGN_SIGNATURE`]), found through the
//! registry's referrers API or, where it has none, the referrers tag schema ([`referrers`]). Either way the
//! signature manifest's layers are simple-signing payloads, each signed in its
//! `dev.cosignproject.cosign/signature` annotation; one payload that the key verifies, that names the manifest
//! digest and an identity the requirement accepts is enough. Payloads are read to at most [`MAX_PAYLOAD`] bytes
//! and checked against their digests.

mod referrers;

use oci_client::Reference;
use oci_client::secrets::RegistryAuth;
use serde_json::Value;

use base64::Engine as _;

use crate::policy::{Identity, Policy, Requirement};
use crate::{Digest, Error, Result};

/// The largest signature payload read.
pub const MAX_PAYLOAD: u64 = 64 << 10;

const SIMPLE_SIGNING: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";

/// Where the registry is and how to reach it, for the signature lookups.
pub(crate) struct Registry<'a> {
    pub clients: &'a crate::fetch::Clients,
    pub auth: &'a RegistryAuth,
    pub plain_http: bool,
    pub stall: Option<std::time::Duration>,
}

/// Whether `identity` (a signature's `docker-reference`) is acceptable for `image` under `how`.
fn identity_matches(how: Identity, identity: &str, image: &Reference) -> bool {
    let repo = format!("{}/{}", image.registry(), image.repository());
    let exact = match (image.tag(), image.digest()) {
        (Some(t), _) => format!("{repo}:{t}"),
        (None, Some(d)) => format!("{repo}@{d}"),
        (None, None) => repo.clone(),
    };
    // A signature names a repository (cosign) or a reference; its repository is the part before a tag or
    // digest.
    let signed_repo = match identity.rsplit_once('@') {
        Some((r, _)) => r,
        None => match identity.rsplit_once(':') {
            Some((r, t)) if !t.contains('/') => r,
            _ => identity,
        },
    };
    match how {
        Identity::MatchRepository => signed_repo == repo,
        Identity::MatchExact => identity == exact,
        Identity::MatchRepoDigestOrExact => match image.tag() {
            Some(_) => identity == exact,
            None => signed_repo == repo,
        },
    }
}

/// Checks pull `image` of manifest `digest` against `policy`; the refusal names the image and why.
pub(crate) async fn check(
    policy: &Policy,
    reg: &Registry<'_>,
    image: &Reference,
    digest: &Digest,
) -> Result<()> {
    let repo = format!("{}/{}", image.registry(), image.repository());
    let whole = image.whole();
    for req in policy.requirements_for(&repo, image.tag()) {
        match req {
            Requirement::InsecureAcceptAnything => {}
            Requirement::Reject => {
                return Err(Error::PolicyRefused(format!(
                    "{whole}: the signature policy rejects {repo}"
                )));
            }
            Requirement::SigstoreSigned { key, identity } => {
                sigstore(reg, image, digest, key, *identity).await?;
            }
        }
    }
    Ok(())
}

/// What a signature must be: of `digest`, by `key`, naming an identity `how` accepts for `image`.
struct Wanted<'a> {
    image: &'a Reference,
    digest: &'a Digest,
    key: &'a [u8],
    how: Identity,
}

/// `image`'s repository at `tag` (through the mirror `image` is pulled from, if any).
fn in_repo(image: &Reference, tag: String) -> Reference {
    let mut r = Reference::with_tag(image.registry().to_string(), image.repository().to_string(), tag);
    if image.resolve_registry() != image.registry() {
        // Pulled through a mirror: the signature is looked up there too.
        r.set_mirror_registry(image.resolve_registry().to_string());
    }
    r
}

/// A signature of `digest` by `key` with an acceptable identity, or PolicyRefused saying what was found:
/// tag-based first, then the image's referrers.
async fn sigstore(
    reg: &Registry<'_>,
    image: &Reference,
    digest: &Digest,
    key: &[u8],
    how: Identity,
) -> Result<()> {
    let whole = image.whole();
    let refused = |why: String| Error::PolicyRefused(format!("{whole} ({digest}): {why}"));
    let want = Wanted {
        image,
        digest,
        key,
        how,
    };
    let mut seen = Vec::new();
    let mut found = 0;
    let sig_ref = in_repo(image, format!("sha256-{}.sig", digest.hex()));
    let accept = [referrers::OCI_MANIFEST];
    match crate::fetch::manifest(
        reg.clients,
        &sig_ref,
        reg.auth,
        reg.plain_http,
        &accept,
        reg.stall,
    )
    .await
    {
        Ok(bytes) => {
            found += 1;
            match serde_json::from_slice::<Value>(&bytes) {
                Ok(m) if verify(reg, &sig_ref, &m, &want, &mut seen).await? => return Ok(()),
                Ok(_) => {}
                Err(e) => seen.push(format!("its signature manifest is not JSON: {e}")),
            }
        }
        Err(Error::NotFound(_)) => {}
        Err(e) => return Err(e),
    }
    for (sig_ref, m) in referrers::signatures(reg, image, digest, &mut seen).await? {
        found += 1;
        if verify(reg, &sig_ref, &m, &want, &mut seen).await? {
            return Ok(());
        }
    }
    Err(refused(match (found, seen.is_empty()) {
        (0, true) => {
            "no signature (sigstoreSigned requires one; none tag-based, none among its referrers)".into()
        }
        (_, true) => "its signature manifest holds no cosign signature".into(),
        _ => format!("no signature verifies: {}", seen.join("; ")),
    }))
}

/// Whether a payload of signature manifest `m` (at `sig_ref`) is the signature `want`s; what was wrong with
/// each payload that is not goes to `seen`.
async fn verify(
    reg: &Registry<'_>,
    sig_ref: &Reference,
    m: &Value,
    want: &Wanted<'_>,
    seen: &mut Vec<String>,
) -> Result<bool> {
    let whole = want.image.whole();
    let verifier =
        ring::signature::UnparsedPublicKey::new(&ring::signature::ECDSA_P256_SHA256_ASN1, want.key);
    for layer in m["layers"].as_array().into_iter().flatten() {
        if layer["mediaType"] != SIMPLE_SIGNING {
            continue;
        }
        let Some(sig) = layer["annotations"][SIGNATURE_ANNOTATION].as_str() else {
            continue;
        };
        let size = crate::bounded::descriptor_size(layer, "signature payload")?;
        let d = Digest::parse(layer["digest"].as_str().unwrap_or_default())?;
        if size > MAX_PAYLOAD {
            seen.push(format!("payload {d} of {size} bytes, over {MAX_PAYLOAD}"));
            continue;
        }
        let mut payload = Vec::new();
        reg.clients
            .oci
            .pull_blob(sig_ref, d.as_str(), &mut payload)
            .await
            .map_err(|e| Error::from_registry(&format!("signature payload {d} of {whole}"), e))?;
        if Digest::of(&payload) != d {
            seen.push(format!("payload {d} does not match its digest"));
            continue;
        }
        let Ok(raw) = base64::engine::general_purpose::STANDARD.decode(sig) else {
            seen.push(format!("payload {d}: its signature is not base64"));
            continue;
        };
        if verifier.verify(&payload, &raw).is_err() {
            seen.push(format!("payload {d}: not signed by the policy's key"));
            continue;
        }
        let p: Value = serde_json::from_slice(&payload).unwrap_or_default();
        let signed = p["critical"]["image"]["docker-manifest-digest"]
            .as_str()
            .unwrap_or_default();
        if signed != want.digest.as_str() {
            seen.push(format!("payload {d} signs {signed:?}"));
            continue;
        }
        let identity = p["critical"]["identity"]["docker-reference"]
            .as_str()
            .unwrap_or_default();
        if !identity_matches(want.how, identity, want.image) {
            seen.push(format!(
                "payload {d} signs identity {identity:?}, which {:?} does not accept",
                want.how
            ));
            continue;
        }
        return Ok(true);
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identities_match_as_containers_policy_says() {
        let by_tag: Reference = "reg.local/team/app:1".parse().unwrap();
        let by_digest: Reference = format!("reg.local/team/app@sha256:{}", "a".repeat(64))
            .parse()
            .unwrap();
        use Identity::*;
        assert!(identity_matches(MatchRepository, "reg.local/team/app", &by_tag));
        assert!(identity_matches(MatchRepository, "reg.local/team/app:2", &by_tag));
        assert!(!identity_matches(
            MatchRepository,
            "reg.local/team/other",
            &by_tag
        ));
        assert!(identity_matches(
            MatchRepoDigestOrExact,
            "reg.local/team/app:1",
            &by_tag
        ));
        assert!(!identity_matches(
            MatchRepoDigestOrExact,
            "reg.local/team/app",
            &by_tag
        ));
        assert!(identity_matches(
            MatchRepoDigestOrExact,
            "reg.local/team/app",
            &by_digest
        ));
        assert!(identity_matches(MatchExact, "reg.local/team/app:1", &by_tag));
        assert!(!identity_matches(MatchExact, "reg.local/team/app:2", &by_tag));
    }
}
