//! Cosign signatures stored as OCI 1.1 referrers of the image they sign. cosign's OCI 1.1 mode
//! (`--registry-referrers-mode=oci-1-1`) pushes, by digest, an image manifest whose `subject` is the signed
//! manifest, whose artifact type is [`COSIGN_SIGNATURE`] (cosign writes it as the config's media type; the
//! top-level `artifactType` is read too) and whose layers are the same simple-signing payloads as a tag-based
//! signature's. The image's referrers are listed by the registry's referrers API (`GET
//! /v2/<name>/referrers/<digest>`, OCI distribution 1.1: an image index, filtered by `artifactType` where the
//! registry supports it, and filtered here again); a registry without that API answers 404, and then the
//! referrers tag schema stands in: the tag `sha256-<hex>` holds an image index of the referrers, which the
//! client that pushed them keeps (Debian's docker-registry 2.8 is such a registry). At most
//! [`MAX_REFERRERS`] signature manifests are read, each checked against its digest and its subject.

use oci_client::Reference;
use serde_json::Value;

use super::{Registry, in_repo};
use crate::fetch::Endpoint;
use crate::{Digest, Error, Result};

/// The artifact type of a cosign signature stored as a referrer.
pub const COSIGN_SIGNATURE: &str = "application/vnd.dev.cosign.artifact.sig.v1+json";
/// An OCI image manifest's media type.
pub(super) const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
/// An OCI image index's media type: what the referrers API and the referrers tag schema hold.
const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
/// The most signature manifests of one image read (a registry can list any number).
pub const MAX_REFERRERS: usize = 16;

/// The cosign signature manifests that refer to `digest` in `image`'s repository, each with the reference
/// its payloads are read through. A listed one that is missing, does not match its digest or names another
/// subject is left out, said in `seen`.
pub(super) async fn signatures(
    reg: &Registry<'_>,
    image: &Reference,
    digest: &Digest,
    seen: &mut Vec<String>,
) -> Result<Vec<(Reference, Value)>> {
    let Some(index) = list(reg, image, digest).await? else {
        return Ok(Vec::new());
    };
    let listed = index["manifests"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|d| d["artifactType"] == COSIGN_SIGNATURE)
        .take(MAX_REFERRERS);
    let mut found = Vec::new();
    for desc in listed {
        let d = Digest::parse(desc["digest"].as_str().unwrap_or_default())?;
        let at = image.clone_with_digest(d.to_string());
        let bytes = match crate::fetch::manifest(
            reg.clients,
            &at,
            reg.auth,
            reg.plain_http,
            &[OCI_MANIFEST],
            reg.stall,
        )
        .await
        {
            Ok(b) => b,
            Err(Error::NotFound(_)) => {
                seen.push(format!("referrer {d} is listed but not in the registry"));
                continue;
            }
            Err(e) => return Err(e),
        };
        if Digest::of(&bytes) != d {
            seen.push(format!("referrer {d} does not match its digest"));
            continue;
        }
        let Ok(m) = serde_json::from_slice::<Value>(&bytes) else {
            seen.push(format!("referrer {d} is not JSON"));
            continue;
        };
        let subject = m["subject"]["digest"].as_str().unwrap_or_default();
        if subject != digest.as_str() {
            seen.push(format!("referrer {d} refers to {subject:?}, not the image"));
            continue;
        }
        let kind = m["artifactType"]
            .as_str()
            .or(m["config"]["mediaType"].as_str())
            .unwrap_or_default();
        if kind != COSIGN_SIGNATURE {
            seen.push(format!("referrer {d} is a {kind:?}, not a cosign signature"));
            continue;
        }
        found.push((at, m));
    }
    Ok(found)
}

/// The referrers index of `digest`: the referrers API's answer or, where the registry has no such API (404),
/// the referrers tag schema's (`sha256-<hex>`); None when neither is there.
async fn list(reg: &Registry<'_>, image: &Reference, digest: &Digest) -> Result<Option<Value>> {
    let api = Endpoint {
        what: "referrers",
        // The filter's `/` and `+` escaped, as a query value.
        path: &format!(
            "referrers/{digest}?artifactType={}",
            COSIGN_SIGNATURE.replace('/', "%2F").replace('+', "%2B")
        ),
    };
    let whole = image.whole();
    let bytes = match crate::fetch::get(
        reg.clients,
        image,
        reg.auth,
        reg.plain_http,
        &api,
        &[OCI_INDEX],
        reg.stall,
    )
    .await
    {
        Ok(b) => b,
        Err(Error::NotFound(_)) => {
            let tag = in_repo(image, format!("sha256-{}", digest.hex()));
            match crate::fetch::manifest(
                reg.clients,
                &tag,
                reg.auth,
                reg.plain_http,
                &[OCI_INDEX],
                reg.stall,
            )
            .await
            {
                Ok(b) => b,
                Err(Error::NotFound(_)) => return Ok(None),
                Err(e) => return Err(e),
            }
        }
        Err(e) => return Err(e),
    };
    let index: Value = serde_json::from_slice(&bytes).map_err(|e| {
        Error::PolicyRefused(format!(
            "{whole} ({digest}): its referrers index is not JSON: {e}"
        ))
    })?;
    Ok(Some(index))
}

#[cfg(test)]
mod tests {
    //! The referrers path against a small registry of the test's own (plain HTTP/1.1, one request per
    //! connection): a cosign signature found through the referrers API, and through the tag schema where the
    //! API answers 404; a wrong key refused.

    use std::collections::HashMap;
    use std::io::{BufRead, BufReader, Write};
    use std::net::TcpListener;
    use std::sync::{Arc, Mutex};

    use base64::Engine as _;
    use oci_client::client::ClientProtocol;
    use oci_client::secrets::RegistryAuth;
    use ring::rand::SystemRandom;
    use ring::signature::{ECDSA_P256_SHA256_ASN1_SIGNING, EcdsaKeyPair, KeyPair};
    use serde_json::json;

    use super::*;
    use crate::policy::Identity;

    /// Path (with query) → (content type, body).
    type Routes = HashMap<String, (&'static str, Vec<u8>)>;

    /// The server: its routes (anything else is 404; `/v2/` is 200) and the paths asked for.
    struct Fake {
        host: String,
        routes: Arc<Mutex<Routes>>,
        asked: Arc<Mutex<Vec<String>>>,
    }

    fn serve() -> Fake {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let host = listener.local_addr().unwrap().to_string();
        let asked = Arc::new(Mutex::new(Vec::new()));
        let routes = Arc::new(Mutex::new(Routes::new()));
        let log = asked.clone();
        let table = routes.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { return };
                let mut r = BufReader::new(conn.try_clone().unwrap());
                let mut line = String::new();
                if r.read_line(&mut line).is_err() {
                    continue;
                }
                let path = line.split_whitespace().nth(1).unwrap_or_default().to_string();
                loop {
                    let mut h = String::new();
                    if r.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
                        break;
                    }
                }
                log.lock().unwrap().push(path.clone());
                let found = table.lock().unwrap().get(&path).cloned();
                let (status, kind, body) = match found {
                    Some((kind, body)) => ("200 OK", kind, body),
                    None if path == "/v2/" => ("200 OK", "application/json", b"{}".to_vec()),
                    None => ("404 Not Found", "application/json", br#"{"errors":[]}"#.to_vec()),
                };
                let head = format!(
                    "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\n\
                     Docker-Content-Digest: {}\r\nConnection: close\r\n\r\n",
                    body.len(),
                    Digest::of(&body)
                );
                let _ = conn
                    .write_all(head.as_bytes())
                    .and_then(|_| conn.write_all(&body));
            }
        });
        Fake { host, routes, asked }
    }

    /// The routes of `team/app` signed by `key` as a referrer of `image`, listed by the referrers API or (with
    /// `tag_schema`) by the `sha256-<hex>` tag.
    fn signed(host: &str, image: &Digest, key: &EcdsaKeyPair, tag_schema: bool) -> Routes {
        let payload = serde_json::to_vec(&json!({
            "critical": {
                "identity": {"docker-reference": format!("{host}/team/app")},
                "image": {"docker-manifest-digest": image.as_str()},
                "type": "cosign container image signature",
            },
            "optional": null,
        }))
        .unwrap();
        let sig = key.sign(&SystemRandom::new(), &payload).unwrap();
        let manifest = serde_json::to_vec(&json!({
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {"mediaType": COSIGN_SIGNATURE, "digest": Digest::of(b"{}").as_str(), "size": 2},
            "layers": [{
                "mediaType": super::super::SIMPLE_SIGNING,
                "digest": Digest::of(&payload).as_str(),
                "size": payload.len(),
                "annotations": {
                    super::super::SIGNATURE_ANNOTATION: base64::engine::general_purpose::STANDARD.encode(sig),
                },
            }],
            "subject": {"mediaType": OCI_MANIFEST, "digest": image.as_str(), "size": 1234},
        }))
        .unwrap();
        let md = Digest::of(&manifest);
        let index = serde_json::to_vec(&json!({
            "schemaVersion": 2,
            "mediaType": OCI_INDEX,
            "manifests": [
                {"mediaType": OCI_MANIFEST, "digest": Digest::of(b"other").as_str(), "size": 5,
                 "artifactType": "application/spdx+json"},
                {"mediaType": OCI_MANIFEST, "digest": md.as_str(), "size": manifest.len(),
                 "artifactType": COSIGN_SIGNATURE},
            ],
        }))
        .unwrap();
        let listed_at = if tag_schema {
            format!("/v2/team/app/manifests/sha256-{}", image.hex())
        } else {
            format!(
                "/v2/team/app/referrers/{image}?artifactType=application%2Fvnd.dev.cosign.artifact.sig.v1%2Bjson"
            )
        };
        HashMap::from([
            (listed_at, (OCI_INDEX, index)),
            (format!("/v2/team/app/manifests/{md}"), (OCI_MANIFEST, manifest)),
            (
                format!("/v2/team/app/blobs/{}", Digest::of(&payload)),
                ("application/octet-stream", payload),
            ),
        ])
    }

    fn key() -> EcdsaKeyPair {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &rng).unwrap();
        EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, pkcs8.as_ref(), &rng).unwrap()
    }

    /// Checks `team/app:1` (manifest `image`) on `fake` against `public`.
    async fn check(fake: &Fake, image: &Digest, public: &[u8]) -> Result<()> {
        let clients = crate::fetch::Clients::new(ClientProtocol::Http).await?;
        let reg = Registry {
            clients: &clients,
            auth: &RegistryAuth::Anonymous,
            plain_http: true,
            stall: None,
        };
        let r: Reference = format!("{}/team/app:1", fake.host).parse().unwrap();
        super::super::sigstore(&reg, &r, image, public, Identity::MatchRepository).await
    }

    #[tokio::test]
    async fn a_referrer_signature_is_found_by_the_api_or_the_tag_schema_and_a_wrong_key_refused() {
        let image = Digest::of(b"the image's manifest");
        let signer = key();
        for tag_schema in [false, true] {
            // The signature names the server's host, so the routes come once it runs.
            let fake = serve();
            *fake.routes.lock().unwrap() = signed(&fake.host, &image, &signer, tag_schema);
            check(&fake, &image, signer.public_key().as_ref())
                .await
                .unwrap_or_else(|e| {
                    panic!(
                        "tag schema {tag_schema}: {e}; asked {:?}",
                        fake.asked.lock().unwrap()
                    )
                });
            let asked = fake.asked.lock().unwrap().clone();
            assert!(
                asked
                    .iter()
                    .any(|p| p.starts_with("/v2/team/app/referrers/sha256:")),
                "the referrers API is asked first: {asked:?}"
            );
            assert_eq!(
                asked
                    .iter()
                    .any(|p| p.ends_with(&format!("sha256-{}", image.hex()))),
                tag_schema,
                "the tag schema is read only where the API answers 404: {asked:?}"
            );

            let e = check(&fake, &image, key().public_key().as_ref())
                .await
                .unwrap_err();
            assert!(matches!(e, Error::PolicyRefused(_)), "{e}");
            assert!(e.to_string().contains("not signed by the policy's key"), "{e}");
        }
        // No signature anywhere: refused, saying so.
        let fake = serve();
        let e = check(&fake, &image, signer.public_key().as_ref())
            .await
            .unwrap_err();
        assert!(e.to_string().contains("no signature"), "{e}");
    }

    /// `routes` with `n` more cosign signatures listed before the real one: manifests the registry does not
    /// have (`decoy-<i>`). Their digests, in the listing's order.
    fn listed_first(routes: &mut Routes, n: usize) -> Vec<Digest> {
        let decoys: Vec<Digest> = (0..n)
            .map(|i| Digest::of(format!("decoy-{i}").as_bytes()))
            .collect();
        for (kind, body) in routes.values_mut() {
            if *kind != OCI_INDEX {
                continue;
            }
            let mut index: Value = serde_json::from_slice(body).unwrap();
            let listed = index["manifests"].as_array_mut().unwrap();
            for (i, d) in decoys.iter().enumerate() {
                listed.insert(
                    i,
                    json!({"mediaType": OCI_MANIFEST, "digest": d.as_str(), "size": 9, "artifactType": COSIGN_SIGNATURE}),
                );
            }
            *body = serde_json::to_vec(&index).unwrap();
        }
        decoys
    }

    #[tokio::test]
    async fn no_more_than_max_referrers_signature_manifests_are_read() {
        let image = Digest::of(b"the image's manifest");
        let signer = key();
        // The real signature listed MAX_REFERRERS-th is read and verifies; listed one later it is not read.
        for (decoys, read) in [(MAX_REFERRERS - 1, true), (MAX_REFERRERS, false)] {
            let fake = serve();
            let mut routes = signed(&fake.host, &image, &signer, false);
            let listed = listed_first(&mut routes, decoys);
            *fake.routes.lock().unwrap() = routes;
            let r = check(&fake, &image, signer.public_key().as_ref()).await;
            let asked = fake.asked.lock().unwrap().clone();
            let referrers_read = asked
                .iter()
                .filter(|p| p.starts_with("/v2/team/app/manifests/sha256:") && !p.contains(image.hex()))
                .collect::<std::collections::HashSet<_>>()
                .len();
            assert_eq!(referrers_read, MAX_REFERRERS, "{decoys} decoys: asked {asked:?}");
            let decoys_read = listed
                .iter()
                .filter(|d| asked.contains(&format!("/v2/team/app/manifests/{d}")))
                .count();
            assert_eq!(decoys_read, decoys.min(MAX_REFERRERS), "asked {asked:?}");
            match r {
                Ok(()) => assert!(read, "{decoys} decoys: the signature past the cap was read"),
                Err(e) => {
                    assert!(!read, "{decoys} decoys: {e}");
                    // Refused, naming what was tried: the decoys read are listed but not in the registry.
                    assert!(matches!(e, Error::PolicyRefused(_)), "{e}");
                    assert!(e.to_string().contains("listed but not in the registry"), "{e}");
                }
            }
        }
    }
}
