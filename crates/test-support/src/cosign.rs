//! Cosign-style signatures for the signature policy tests, made in the test: an ECDSA P-256 key (ring), its
//! public key in PEM as cosign writes `cosign.pub`, and a signature (an OCI manifest of one simple-signing
//! payload with its signature in an annotation) pushed to a [`Registry`]: tag-based (`<repo>:sha256-<hex>.sig`,
//! [`sign_and_push`]) or as cosign's OCI 1.1 mode stores it, a referrer of the image listed by the referrers tag
//! schema ([`sign_and_push_referrer`]).

use base64::Engine as _;
use ring::rand::SystemRandom;
use ring::signature::{ECDSA_P256_SHA256_ASN1_SIGNING, EcdsaKeyPair, KeyPair};

use crate::registry::{Registry, sha256};

/// A signing key made for one test.
pub struct SigningKey {
    pair: EcdsaKeyPair,
}

/// The DER prefix of a P-256 SubjectPublicKeyInfo, before the key's point.
const P256_SPKI_PREFIX: [u8; 26] = [
    0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a, 0x86,
    0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
];

impl SigningKey {
    /// A new random key.
    pub fn generate() -> SigningKey {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &rng).expect("key");
        let pair =
            EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, pkcs8.as_ref(), &rng).expect("key");
        SigningKey { pair }
    }

    /// The public key in PEM (a SubjectPublicKeyInfo).
    pub fn public_pem(&self) -> String {
        let mut der = P256_SPKI_PREFIX.to_vec();
        der.extend_from_slice(self.pair.public_key().as_ref());
        let b64 = base64::engine::general_purpose::STANDARD.encode(der);
        let lines: Vec<&str> = b64
            .as_bytes()
            .chunks(64)
            .map(|c| std::str::from_utf8(c).expect("base64"))
            .collect();
        format!(
            "-----BEGIN PUBLIC KEY-----\n{}\n-----END PUBLIC KEY-----\n",
            lines.join("\n")
        )
    }

    /// An ASN.1 DER ECDSA signature of `payload`.
    pub fn sign(&self, payload: &[u8]) -> Vec<u8> {
        self.pair
            .sign(&SystemRandom::new(), payload)
            .expect("signing")
            .as_ref()
            .to_vec()
    }
}

/// The simple-signing payload naming `digest` and `identity`, and its layer descriptor (signed by `key`), the
/// payload uploaded to `repo`.
fn signed_layer(
    reg: &Registry,
    repo: &str,
    digest: &str,
    identity: &str,
    key: &SigningKey,
) -> serde_json::Value {
    let payload = serde_json::to_vec(&serde_json::json!({
        "critical": {
            "identity": {"docker-reference": identity},
            "image": {"docker-manifest-digest": digest},
            "type": "cosign container image signature",
        },
        "optional": null,
    }))
    .expect("payload");
    let signature = base64::engine::general_purpose::STANDARD.encode(key.sign(&payload));
    let layer = reg.upload(repo, &payload);
    serde_json::json!({
        "mediaType": "application/vnd.dev.cosign.simplesigning.v1+json",
        "digest": layer,
        "size": payload.len(),
        "annotations": {"dev.cosignproject.cosign/signature": signature},
    })
}

/// Signs manifest `digest` of `<host>/<repo>` with `key` as cosign does, naming `identity` (cosign names the
/// repository), and pushes the signature next to it.
pub fn sign_and_push(reg: &Registry, repo: &str, digest: &str, identity: &str, key: &SigningKey) {
    let empty = b"{}";
    reg.upload(repo, empty);
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.empty.v1+json", "digest": sha256(empty), "size": 2},
        "layers": [signed_layer(reg, repo, digest, identity, key)],
    });
    let hex = digest.trim_start_matches("sha256:");
    reg.put_manifest(repo, &format!("sha256-{hex}.sig"), &manifest);
}

/// The artifact type of cosign's signatures stored as referrers.
pub const COSIGN_SIGNATURE: &str = "application/vnd.dev.cosign.artifact.sig.v1+json";

/// Signs manifest `digest` (of `size` bytes) of `<host>/<repo>` as cosign's OCI 1.1 mode stores a signature:
/// a manifest pushed by digest whose `subject` is the image and whose config's media type is
/// [`COSIGN_SIGNATURE`]; then, as its client does for a registry without the referrers API (this one), the
/// referrers tag schema: `<repo>:sha256-<hex>`, an image index listing it. Returns the signature's digest.
pub fn sign_and_push_referrer(
    reg: &Registry,
    repo: &str,
    (digest, size): (&str, u64),
    identity: &str,
    key: &SigningKey,
) -> String {
    let empty = b"{}";
    reg.upload(repo, empty);
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": COSIGN_SIGNATURE, "digest": sha256(empty), "size": 2},
        "layers": [signed_layer(reg, repo, digest, identity, key)],
        "subject": {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": digest, "size": size},
    });
    let body = serde_json::to_vec(&manifest).expect("manifest");
    let sig = reg.put_manifest(repo, &sha256(&body), &manifest);
    let index = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": sig,
            "size": body.len(),
            "artifactType": COSIGN_SIGNATURE,
        }],
    });
    let hex = digest.trim_start_matches("sha256:");
    reg.put_manifest_as(
        repo,
        &format!("sha256-{hex}"),
        "application/vnd.oci.image.index.v1+json",
        &index,
    );
    sig
}
