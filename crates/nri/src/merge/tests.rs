//! The ownership rule: plugins' changes merge in order; two plugins changing one field is a conflict naming both.

use super::*;
use crate::api::{KeyValue, LinuxContainerAdjustment, LinuxContainerUpdate, LinuxCpu, Mount, OptionalUInt64};

fn env(pairs: &[(&str, &str)]) -> ContainerAdjustment {
    ContainerAdjustment {
        env: pairs
            .iter()
            .map(|(k, v)| KeyValue {
                key: k.to_string(),
                value: v.to_string(),
            })
            .collect(),
        ..Default::default()
    }
}

fn shares(n: u64) -> LinuxResources {
    LinuxResources {
        cpu: Some(LinuxCpu {
            shares: Some(OptionalUInt64 { value: n }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[test]
fn different_fields_merge_in_plugin_order() {
    let (mut owners, mut merged) = (Owners::default(), ContainerAdjustment::default());
    merge_adjustment(&mut owners, "c1", "10-a", &mut merged, env(&[("A", "1")])).unwrap();
    let mut b = env(&[("B", "2")]);
    b.mounts.push(Mount {
        destination: "/data".into(),
        source: "/srv".into(),
        ..Default::default()
    });
    merge_adjustment(&mut owners, "c1", "20-b", &mut merged, b).unwrap();
    let keys: Vec<_> = merged.env.iter().map(|e| e.key.as_str()).collect();
    assert_eq!(keys, ["A", "B"]);
    assert_eq!(merged.mounts.len(), 1);
}

#[test]
fn two_plugins_changing_one_field_is_a_conflict_naming_both() {
    let (mut owners, mut merged) = (Owners::default(), ContainerAdjustment::default());
    merge_adjustment(&mut owners, "c1", "10-a", &mut merged, env(&[("A", "1")])).unwrap();
    let err = merge_adjustment(&mut owners, "c1", "20-b", &mut merged, env(&[("A", "2")])).unwrap_err();
    assert_eq!(err.to_string(), "NRI plugins 10-a and 20-b both change env A");
    // Removing counts as changing.
    let err = merge_adjustment(&mut owners, "c1", "30-c", &mut merged, env(&[("-A", "")])).unwrap_err();
    assert!(
        matches!(err, Error::Conflict { ref plugins, .. } if plugins[1] == "30-c"),
        "{err}"
    );

    let linux = |r| ContainerAdjustment {
        linux: Some(LinuxContainerAdjustment {
            resources: Some(r),
            ..Default::default()
        }),
        ..Default::default()
    };
    merge_adjustment(&mut owners, "c1", "10-a", &mut merged, linux(shares(100))).unwrap();
    let err = merge_adjustment(&mut owners, "c1", "20-b", &mut merged, linux(shares(200))).unwrap_err();
    assert!(
        matches!(err, Error::Conflict { ref field, .. } if field == "CPU shares"),
        "{err}"
    );
}

#[test]
fn a_plugin_may_change_its_own_field_again_and_removal_drops_its_addition() {
    let (mut owners, mut merged) = (Owners::default(), ContainerAdjustment::default());
    merge_adjustment(&mut owners, "c1", "10-a", &mut merged, env(&[("A", "1")])).unwrap();
    merge_adjustment(&mut owners, "c1", "10-a", &mut merged, env(&[("-A", "")])).unwrap();
    let keys: Vec<_> = merged.env.iter().map(|e| e.key.as_str()).collect();
    assert_eq!(keys, ["-A"]);
}

#[test]
fn updates_merge_per_container_and_conflict_per_field() {
    let update = |id: &str, r, ignore| ContainerUpdate {
        container_id: id.into(),
        linux: Some(LinuxContainerUpdate { resources: Some(r) }),
        ignore_failure: ignore,
    };
    let (mut owners, mut updates) = (Owners::default(), Updates::default());
    let mut mem = LinuxResources::default();
    mem.unified.insert("memory.high".into(), "1G".into());
    updates
        .add(
            &mut owners,
            "10-a",
            vec![update("c1", shares(100), false), update("c2", shares(5), false)],
        )
        .unwrap();
    updates
        .add(&mut owners, "20-b", vec![update("c1", mem, false)])
        .unwrap();
    assert_eq!(updates.list.len(), 2);
    let r = updates.list[0]
        .linux
        .as_ref()
        .unwrap()
        .resources
        .as_ref()
        .unwrap();
    assert_eq!(
        (r.cpu.as_ref().unwrap().shares.unwrap().value, r.unified.len()),
        (100, 1)
    );

    updates
        .add(&mut owners, "20-b", vec![update("c2", shares(6), true)])
        .unwrap();
    let r = updates.list[1]
        .linux
        .as_ref()
        .unwrap()
        .resources
        .as_ref()
        .unwrap();
    assert_eq!(
        r.cpu.as_ref().unwrap().shares.unwrap().value,
        5,
        "an ignorable conflicting update is dropped"
    );
    let err = updates
        .add(&mut owners, "20-b", vec![update("c2", shares(6), false)])
        .unwrap_err();
    assert!(matches!(err, Error::Conflict { .. }));
}
