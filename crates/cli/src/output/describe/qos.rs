//! A pod's QoS class when its status does not carry one, by Kubernetes' rule (`GetPodQOS`), and the resource
//! quantities that rule compares.

use crate::output::{at, list_at};
use serde_json::Value;

/// A quantity (`500m`, `1.5`, `128Mi`, `1G`, `2e3`) as a number of units (cores, bytes); `None` if unreadable.
pub(super) fn parse_quantity(q: &str) -> Option<f64> {
    let q = q.trim();
    let split = q
        .find(|c: char| !(c.is_ascii_digit() || matches!(c, '.' | '+' | '-')))
        .unwrap_or(q.len());
    let (num, suffix) = q.split_at(split);
    let n: f64 = num.parse().ok()?;
    let scale = match suffix {
        "" => 1.0,
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024.0,
        "Mi" => 1024.0 * 1024.0,
        "Gi" => 1024.0 * 1024.0 * 1024.0,
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        s if s.starts_with(['e', 'E']) => 10f64.powi(s[1..].parse().ok()?),
        _ => return None,
    };
    Some(n * scale)
}

/// `Guaranteed` when every container limits cpu and memory and the pod's requests equal its limits,
/// `BestEffort` without any cpu or memory request or limit, `Burstable` otherwise. A request left out where a
/// limit is set counts as the limit, as the API server defaults it.
pub(super) fn class(pod: &Value) -> &'static str {
    let mut requests = [0.0f64; 2];
    let mut limits = [0.0f64; 2];
    let (mut any_request, mut any_limit) = ([false; 2], [false; 2]);
    let mut guaranteed = true;
    let containers = list_at(pod, &["spec", "containers"])
        .iter()
        .chain(list_at(pod, &["spec", "initContainers"]));
    for c in containers {
        for (i, name) in ["cpu", "memory"].into_iter().enumerate() {
            let q = |kind: &str| {
                at(c, &["resources", kind, name])
                    .and_then(Value::as_str)
                    .and_then(parse_quantity)
                    .filter(|q| *q > 0.0)
            };
            let limit = q("limits");
            if let Some(r) = q("requests").or(limit) {
                requests[i] += r;
                any_request[i] = true;
            }
            match limit {
                Some(l) => {
                    limits[i] += l;
                    any_limit[i] = true;
                }
                None => guaranteed = false,
            }
        }
    }
    if !any_request.iter().chain(&any_limit).any(|b| *b) {
        return "BestEffort";
    }
    let same =
        (0..2).all(|i| any_request[i] == any_limit[i] && (requests[i] - limits[i]).abs() <= 1e-9 * limits[i]);
    if guaranteed && same {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn quantities() {
        assert_eq!(parse_quantity("500m"), Some(0.5));
        assert_eq!(parse_quantity("2"), Some(2.0));
        assert_eq!(parse_quantity("128Mi"), Some(134_217_728.0));
        assert_eq!(parse_quantity("1G"), Some(1e9));
        assert_eq!(parse_quantity("1.5Gi"), Some(1_610_612_736.0));
        assert_eq!(parse_quantity("2e3"), Some(2000.0));
        assert_eq!(parse_quantity("12x"), None);
        assert_eq!(parse_quantity(""), None);
    }

    fn pod(resources: &[Value]) -> Value {
        let containers: Vec<Value> = resources
            .iter()
            .map(|r| json!({"name": "c", "resources": r}))
            .collect();
        json!({"spec": {"containers": containers}})
    }

    #[test]
    fn classes() {
        assert_eq!(class(&pod(&[json!({})])), "BestEffort");
        let full = json!({"limits": {"cpu": "500m", "memory": "128Mi"}, "requests": {"cpu": "0.5", "memory": "128Mi"}});
        assert_eq!(class(&pod(std::slice::from_ref(&full))), "Guaranteed");
        assert_eq!(
            class(&pod(&[json!({"limits": {"cpu": "1", "memory": "1Gi"}})])),
            "Guaranteed"
        );
        assert_eq!(class(&pod(&[full.clone(), json!({})])), "Burstable");
        assert_eq!(class(&pod(&[json!({"requests": {"cpu": "100m"}})])), "Burstable");
        let more = json!({"limits": {"cpu": "1", "memory": "128Mi"}, "requests": {"cpu": "500m", "memory": "128Mi"}});
        assert_eq!(class(&pod(&[more])), "Burstable");
    }
}
