//! The checks of a pod's volumes: names given, valid and unique, one source each, and each source's fields as
//! the API server checks them: required names and paths, file modes, item paths (relative, no `..`), the
//! downward API's field paths, resources and divisors, a projection's sources (one type each, no path given
//! twice), an image volume's reference and pull policy, and the quantities (`emptyDir.sizeLimit`, ephemeral
//! claims).

use std::collections::HashSet;

use k8s_openapi::api::core::v1::{DownwardAPIVolumeFile, KeyToPath, Volume, VolumeProjection};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::pod::{amount, amounts};
use super::{Found, names};
use crate::downward::{self, Reader};
use crate::quantity;

/// The API server's words for a bad file mode.
const MODE_RANGE: &str = "must be a number between 0 and 0777 (octal), both inclusive";

/// The volumes at `{at}.volumes`, their problems in `found`; their names.
pub(super) fn volumes<'a>(volumes: &'a [Volume], at: &str, found: &mut Found) -> HashSet<&'a str> {
    let mut seen = HashSet::new();
    for (i, v) in volumes.iter().enumerate() {
        let at = format!("{at}.volumes[{i}]");
        found.name(format!("{at}.name"), &v.name, names::label);
        if !v.name.is_empty() && !seen.insert(v.name.as_str()) {
            found.duplicate(format!("{at}.name"), &v.name);
        }
        let sources = serde_json::to_value(v)
            .ok()
            .and_then(|j| j.as_object().map(|o| o.keys().filter(|k| *k != "name").count()))
            .unwrap_or(0);
        match sources {
            0 => found.add(&at, "Required value: must specify a volume type"),
            1 => {}
            _ => found.forbidden(&at, "may not specify more than 1 volume type"),
        }
        if let Some(e) = &v.empty_dir
            && let Some(q) = &e.size_limit
        {
            amount("storage", q, &format!("{at}.emptyDir.sizeLimit"), found);
        }
        if let Some(c) = &v.config_map {
            let at = format!("{at}.configMap");
            if c.name.is_empty() {
                found.required(format!("{at}.name"));
            }
            mode(c.default_mode, &format!("{at}.defaultMode"), found);
            key_paths(c.items.as_deref(), &at, found);
        }
        if let Some(s) = &v.secret {
            let at = format!("{at}.secret");
            if s.secret_name.as_deref().unwrap_or("").is_empty() {
                found.required(format!("{at}.secretName"));
            }
            mode(s.default_mode, &format!("{at}.defaultMode"), found);
            key_paths(s.items.as_deref(), &at, found);
        }
        if let Some(d) = &v.downward_api {
            let at = format!("{at}.downwardAPI");
            mode(d.default_mode, &format!("{at}.defaultMode"), found);
            downward_files(d.items.as_deref(), &at, found);
        }
        if let Some(p) = &v.projected {
            let at = format!("{at}.projected");
            mode(p.default_mode, &format!("{at}.defaultMode"), found);
            projections(p.sources.as_deref().unwrap_or(&[]), &at, found);
        }
        if let Some(i) = &v.image {
            if i.reference.as_deref().unwrap_or("").is_empty() {
                found.required(format!("{at}.image.reference"));
            }
            if let Some(p) = i.pull_policy.as_deref() {
                const POLICIES: &[&str] = &["Always", "IfNotPresent", "Never"];
                if !POLICIES.contains(&p) {
                    found.unsupported(format!("{at}.image.pullPolicy"), p, POLICIES);
                }
            }
        }
        if v.host_path.as_ref().is_some_and(|h| h.path.is_empty()) {
            found.required(format!("{at}.hostPath.path"));
        }
        if v.persistent_volume_claim
            .as_ref()
            .is_some_and(|c| c.claim_name.is_empty())
        {
            found.required(format!("{at}.persistentVolumeClaim.claimName"));
        }
        let claim = v
            .ephemeral
            .as_ref()
            .and_then(|e| e.volume_claim_template.as_ref());
        if let Some(r) = claim.and_then(|t| t.spec.resources.as_ref()) {
            let at = format!("{at}.ephemeral.volumeClaimTemplate.spec.resources");
            amounts(r.requests.as_ref(), &format!("{at}.requests"), found);
            amounts(r.limits.as_ref(), &format!("{at}.limits"), found);
        }
    }
    seen
}

/// A file mode, if given: 0 to 0777.
fn mode(m: Option<i32>, at: &str, found: &mut Found) {
    if let Some(m) = m.filter(|m| !(0..=0o777).contains(m)) {
        found.invalid(at, m, MODE_RANGE);
    }
}

/// A file's path inside its volume, as the API server checks it; whether it is one.
fn path(p: &str, at: &str, found: &mut Found) -> bool {
    let why = if p.is_empty() {
        found.required(at);
        return false;
    } else if p.starts_with('/') {
        "must be a relative path"
    } else if p.split('/').any(|part| part == "..") {
        "must not contain '..'"
    } else if p.starts_with("..") {
        "must not start with '..'"
    } else {
        return true;
    };
    found.invalid(at, p, why);
    false
}

/// The `items` of a configMap or secret (volume or projection) at `at`; their paths.
fn key_paths<'a>(items: Option<&'a [KeyToPath]>, at: &str, found: &mut Found) -> Vec<&'a str> {
    let mut out = Vec::new();
    for (i, item) in items.into_iter().flatten().enumerate() {
        let at = format!("{at}.items[{i}]");
        if item.key.is_empty() {
            found.required(format!("{at}.key"));
        }
        if path(&item.path, &format!("{at}.path"), found) {
            out.push(item.path.as_str());
        }
        mode(item.mode, &format!("{at}.mode"), found);
    }
    out
}

/// The `items` of a downwardAPI volume or projection at `at`: a path each, one of fieldRef (a field a file
/// may name) and resourceFieldRef (a container, a resource and its divisor); their paths.
fn downward_files<'a>(
    items: Option<&'a [DownwardAPIVolumeFile]>,
    at: &str,
    found: &mut Found,
) -> Vec<&'a str> {
    let mut out = Vec::new();
    for (i, item) in items.into_iter().flatten().enumerate() {
        let at = format!("{at}.items[{i}]");
        if path(&item.path, &format!("{at}.path"), found) {
            out.push(item.path.as_str());
        }
        mode(item.mode, &format!("{at}.mode"), found);
        match (&item.field_ref, &item.resource_field_ref) {
            (Some(f), None) => {
                let at = format!("{at}.fieldRef");
                if f.api_version.as_deref().is_some_and(|v| v != "v1") {
                    found.unsupported(
                        format!("{at}.apiVersion"),
                        f.api_version.as_deref().unwrap_or(""),
                        &["v1"],
                    );
                }
                let p = f.field_path.as_str();
                if p.is_empty() {
                    found.required(format!("{at}.fieldPath"));
                } else if let Some((_, key)) = downward::subscript(p) {
                    if let Some(why) = names::label_key(key) {
                        found.invalid(format!("{at}.fieldPath"), p, why);
                    }
                } else if !downward::readable(p, Reader::File) {
                    found.unsupported(format!("{at}.fieldPath"), p, &downward::FILE_FIELDS);
                }
            }
            (None, Some(r)) => {
                let at = format!("{at}.resourceFieldRef");
                if r.container_name.as_deref().unwrap_or("").is_empty() {
                    found.required(format!("{at}.containerName"));
                }
                if r.resource.is_empty() {
                    found.required(format!("{at}.resource"));
                } else if !downward::RESOURCES.contains(&r.resource.as_str()) {
                    found.unsupported(format!("{at}.resource"), &r.resource, &downward::RESOURCES);
                } else if let Some(d) = &r.divisor {
                    divisor(&r.resource, d, &format!("{at}.divisor"), found);
                }
            }
            (Some(_), Some(_)) => found.invalid(
                &at,
                "resource",
                "fieldRef and resourceFieldRef can not be specified simultaneously",
            ),
            (None, None) => found.required(format!("{at}.fieldRef")),
        }
    }
    out
}

/// A resourceFieldRef's divisor: a power of ten or of 1024 for memory and storage, 1m or 1 for cpu.
fn divisor(resource: &str, d: &Quantity, at: &str, found: &mut Found) {
    let (ok, allowed) = if resource.ends_with(".cpu") {
        (
            quantity::milli_cpu(d).is_ok_and(|m| m == 1 || m == 1000),
            "1m and 1",
        )
    } else {
        let mut powers = (0..=6)
            .map(|n| 1000u64.pow(n))
            .chain((1..=6).map(|n| 1u64 << (10 * n)));
        (
            quantity::value(d).is_ok_and(|v| powers.any(|p| p == v)),
            "1, 1k, 1M, 1G, 1T, 1P, 1E, 1Ki, 1Mi, 1Gi, 1Ti, 1Pi, 1Ei",
        )
    };
    if !ok {
        let what = resource.split_once('.').map_or(resource, |(_, r)| r);
        found.invalid(
            at,
            &d.0,
            &format!("only divisor's values {allowed} are supported with the {what} resource"),
        );
    }
}

/// A projected volume's `sources` at `at`: one type each, their fields, no path written by two.
fn projections(sources: &[VolumeProjection], at: &str, found: &mut Found) {
    let mut paths = HashSet::new();
    for (i, s) in sources.iter().enumerate() {
        let at = format!("{at}.sources[{i}]");
        let types = [
            s.config_map.is_some(),
            s.secret.is_some(),
            s.downward_api.is_some(),
            s.service_account_token.is_some(),
            s.cluster_trust_bundle.is_some(),
            s.pod_certificate.is_some(),
        ];
        match types.iter().filter(|t| **t).count() {
            0 => found.add(&at, "Required value: must specify a source type"),
            1 => {}
            _ => found.forbidden(&at, "may not specify more than 1 volume type per source"),
        }
        let mut written = Vec::new();
        if let Some(c) = &s.config_map {
            if c.name.is_empty() {
                found.required(format!("{at}.configMap.name"));
            }
            written.extend(key_paths(c.items.as_deref(), &format!("{at}.configMap"), found));
        }
        if let Some(c) = &s.secret {
            if c.name.is_empty() {
                found.required(format!("{at}.secret.name"));
            }
            written.extend(key_paths(c.items.as_deref(), &format!("{at}.secret"), found));
        }
        if let Some(d) = &s.downward_api {
            written.extend(downward_files(
                d.items.as_deref(),
                &format!("{at}.downwardAPI"),
                found,
            ));
        }
        if let Some(t) = &s.service_account_token {
            let at = format!("{at}.serviceAccountToken");
            if path(&t.path, &format!("{at}.path"), found) {
                written.push(t.path.as_str());
            }
            if let Some(e) = t.expiration_seconds.filter(|e| *e < 600) {
                found.invalid(
                    format!("{at}.expirationSeconds"),
                    e,
                    "may not specify a duration less than 10 minutes",
                );
            }
        }
        for p in written {
            if !paths.insert(p) {
                found.invalid(&at, p, "conflicting duplicate paths");
            }
        }
    }
}
