//! Tests of CDI: spec files read from temp dirs, devices resolved from the field and the annotations, and
//! their edits applied to a spec.

use std::path::{Path, PathBuf};

use crius_api::cri;
use oci_spec::runtime::{LinuxDeviceType, Spec};

use super::*;
use crate::error::Error;

const VENDOR: &str = r#"{
  "cdiVersion": "0.6.0",
  "kind": "vendor.example/gpu",
  "containerEdits": {"env": ["VENDOR_LIB=1"]},
  "devices": [
    {"name": "0", "containerEdits": {
      "env": ["GPU=0", "PATH=/gpu/bin"],
      "deviceNodes": [{"path": "/dev/gpu0", "hostPath": "/dev/null", "permissions": "rw"}],
      "mounts": [{"hostPath": "/opt/gpu", "containerPath": "/usr/gpu", "options": ["ro", "bind"]}],
      "hooks": [{"hookName": "createContainer", "path": "/usr/bin/gpu-hook", "args": ["gpu-hook", "x"],
                 "env": ["A=b"], "timeout": 5}],
      "additionalGIDs": [44, 0]
    }},
    {"name": "1", "containerEdits": {
      "deviceNodes": [{"path": "/dev/gpu1", "type": "c", "major": 195, "minor": 1, "fileMode": 432,
                       "uid": 0, "gid": 44}],
      "additionalGIDs": [44]
    }}
  ]
}"#;

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn base() -> Spec {
    // Without capabilities, whose sets serialize in no fixed order.
    let mut s = Spec::default();
    let p = s.process_mut().as_mut().unwrap();
    p.set_env(Some(vec!["PATH=/usr/bin".into()]));
    p.set_capabilities(None);
    s
}

fn field(names: &[&str]) -> cri::ContainerConfig {
    cri::ContainerConfig {
        cdi_devices: names
            .iter()
            .map(|n| cri::CdiDevice { name: n.to_string() })
            .collect(),
        ..Default::default()
    }
}

fn annotated(key: &str, value: &str) -> cri::ContainerConfig {
    cri::ContainerConfig {
        annotations: [(key.to_string(), value.to_string())].into(),
        ..Default::default()
    }
}

fn refusal(r: Result<()>) -> (String, String) {
    match r {
        Err(Error::InvalidArgument { field, reason, .. }) => (field, reason),
        other => panic!("not refused as InvalidArgument: {other:?}"),
    }
}

#[test]
fn a_device_and_its_files_edits_are_applied() {
    let tmp = tempfile::tempdir().unwrap();
    write(tmp.path(), "vendor.json", VENDOR);
    let cdi = Devices {
        dirs: vec![tmp.path().into()],
    };
    let mut spec = base();
    cdi.apply(
        &mut spec,
        &field(&["vendor.example/gpu=0", "vendor.example/gpu=1"]),
    )
    .unwrap();
    let env = spec.process().as_ref().unwrap().env().clone().unwrap();
    assert_eq!(env, ["PATH=/gpu/bin", "VENDOR_LIB=1", "GPU=0"]);
    let linux = spec.linux().as_ref().unwrap();
    let devs = linux.devices().as_ref().unwrap();
    let null = crate::convert::host_device(Path::new("/dev/null")).unwrap();
    let gpu0 = devs.iter().find(|d| d.path() == Path::new("/dev/gpu0")).unwrap();
    assert_eq!(
        (gpu0.typ(), gpu0.major(), gpu0.minor()),
        (LinuxDeviceType::C, 1, 3)
    );
    assert_eq!(
        (gpu0.file_mode(), gpu0.uid(), gpu0.gid()),
        (Some(null.mode), Some(null.uid), Some(null.gid))
    );
    let gpu1 = devs.iter().find(|d| d.path() == Path::new("/dev/gpu1")).unwrap();
    assert_eq!(
        (gpu1.major(), gpu1.minor(), gpu1.file_mode(), gpu1.gid()),
        (195, 1, Some(0o660), Some(44))
    );
    let rules = linux.resources().as_ref().unwrap().devices().as_ref().unwrap();
    let rule = |major| rules.iter().find(|r| r.major() == Some(major)).unwrap();
    assert_eq!(
        (rule(1).allow(), rule(1).minor(), rule(1).access().as_deref()),
        (true, Some(3), Some("rw"))
    );
    assert_eq!(rule(195).access().as_deref(), Some("rwm"));
    let m = spec
        .mounts()
        .as_ref()
        .unwrap()
        .iter()
        .find(|m| m.destination() == Path::new("/usr/gpu"));
    let m = m.unwrap();
    assert_eq!(m.source().as_deref(), Some(Path::new("/opt/gpu")));
    assert_eq!(
        m.options().as_deref(),
        Some(&["ro".to_string(), "bind".to_string()][..])
    );
    let hooks = spec.hooks().as_ref().unwrap().create_container().clone().unwrap();
    assert_eq!(hooks.len(), 1);
    assert_eq!(hooks[0].path(), Path::new("/usr/bin/gpu-hook"));
    assert_eq!(
        hooks[0].args().as_deref(),
        Some(&["gpu-hook".to_string(), "x".to_string()][..])
    );
    assert_eq!(hooks[0].timeout(), Some(5));
    let user = spec.process().as_ref().unwrap().user();
    assert_eq!(user.additional_gids().as_deref(), Some(&[44][..]));
}

#[test]
fn the_field_and_the_annotation_name_the_same_device() {
    let tmp = tempfile::tempdir().unwrap();
    write(tmp.path(), "vendor.yaml", VENDOR);
    let cdi = Devices {
        dirs: vec![tmp.path().into()],
    };
    let (mut a, mut b) = (base(), base());
    cdi.apply(&mut a, &field(&["vendor.example/gpu=0"])).unwrap();
    cdi.apply(&mut b, &annotated("cdi.k8s.io/gpu", "vendor.example/gpu=0"))
        .unwrap();
    assert_eq!(
        serde_json::to_value(&a).unwrap(),
        serde_json::to_value(&b).unwrap()
    );
    // Both at once: applied once.
    let mut both = field(&["vendor.example/gpu=0"]);
    both.annotations = annotated("cdi.k8s.io/x", " vendor.example/gpu=0 ,vendor.example/gpu=1").annotations;
    assert_eq!(requested(&both).len(), 2);
    let mut c = base();
    cdi.apply(&mut c, &both).unwrap();
    assert_eq!(c.linux().as_ref().unwrap().devices().as_ref().unwrap().len(), 2);
    assert_eq!(
        c.hooks()
            .as_ref()
            .unwrap()
            .create_container()
            .as_ref()
            .unwrap()
            .len(),
        1
    );
    // Other annotations name nothing.
    assert!(requested(&annotated("example.com/gpu", "vendor.example/gpu=0")).is_empty());
}

#[test]
fn nothing_asked_reads_nothing_and_changes_nothing() {
    let cdi = Devices {
        dirs: vec!["/nonexistent/cdi".into()],
    };
    let mut spec = base();
    cdi.apply(&mut spec, &cri::ContainerConfig::default()).unwrap();
    assert_eq!(
        serde_json::to_value(&spec).unwrap(),
        serde_json::to_value(base()).unwrap()
    );
}

#[test]
fn a_later_dir_overrides_and_specs_are_read_at_each_create() {
    let tmp = tempfile::tempdir().unwrap();
    let (etc, run) = (tmp.path().join("etc"), tmp.path().join("run"));
    let spec = |env: &str| {
        format!(
            "cdiVersion: 1.0.0\nkind: vendor.example/nic\ndevices:\n\
             - name: eth0\n  containerEdits:\n    env: [\"{env}\"]\n"
        )
    };
    write(&etc, "nic.yaml", &spec("NIC=etc"));
    let cdi = Devices {
        dirs: vec![etc.clone(), run.clone()],
    };
    let env_of = |s: &Spec| s.process().as_ref().unwrap().env().clone().unwrap();
    let mut s = base();
    cdi.apply(&mut s, &field(&["vendor.example/nic=eth0"])).unwrap();
    assert!(env_of(&s).contains(&"NIC=etc".to_string()));
    write(&run, "nic.yaml", &spec("NIC=run"));
    let mut s = base();
    cdi.apply(&mut s, &field(&["vendor.example/nic=eth0"])).unwrap();
    assert!(env_of(&s).contains(&"NIC=run".to_string()), "{:?}", env_of(&s));
    assert!(!env_of(&s).contains(&"NIC=etc".to_string()));
}

#[test]
fn unknown_invalid_and_conflicting_devices_are_refused_by_name() {
    let tmp = tempfile::tempdir().unwrap();
    write(tmp.path(), "vendor.json", VENDOR);
    let cdi = Devices {
        dirs: vec![tmp.path().into()],
    };
    let (f, why) = refusal(cdi.apply(&mut base(), &field(&["vendor.example/gpu=9"])));
    assert_eq!(f, "CDI_devices[0].name");
    assert!(
        why.contains("vendor.example/gpu=9") && why.contains("no spec file"),
        "{why}"
    );
    let (f, why) = refusal(cdi.apply(&mut base(), &annotated("cdi.k8s.io/a", "gpu0")));
    assert_eq!(f, "annotations[cdi.k8s.io/a]");
    assert!(why.contains("fully qualified"), "{why}");

    // An invalid file of the device's kind is named.
    let bad = write(
        tmp.path(),
        "zbad.yaml",
        "cdiVersion: 0.1.0\nkind: other.example/fpga\ndevices: [{name: a}]\n",
    );
    let (_, why) = refusal(cdi.apply(&mut base(), &field(&["other.example/fpga=a"])));
    assert!(
        why.contains(&bad.display().to_string()) && why.contains("cdiVersion"),
        "{why}"
    );
    // The other files still serve.
    cdi.apply(&mut base(), &field(&["vendor.example/gpu=1"])).unwrap();

    // Two files of one dir define one device.
    let dup = write(tmp.path(), "vendor2.json", VENDOR);
    let (_, why) = refusal(cdi.apply(&mut base(), &field(&["vendor.example/gpu=1"])));
    assert!(
        why.contains(&dup.display().to_string()) && why.contains("vendor.json"),
        "{why}"
    );
    std::fs::remove_file(dup).unwrap();

    // Two devices put different nodes at one path.
    write(
        tmp.path(),
        "clash.yaml",
        "cdiVersion: 0.5.0\nkind: clash.example/dev\ndevices:\n\
         - {name: a, containerEdits: {deviceNodes: [{path: /dev/x, type: c, major: 1, minor: 3}]}}\n\
         - {name: b, containerEdits: {deviceNodes: [{path: /dev/x, type: c, major: 1, minor: 5}]}}\n",
    );
    let (_, why) = refusal(cdi.apply(
        &mut base(),
        &field(&["clash.example/dev=a", "clash.example/dev=b"]),
    ));
    assert!(
        why.contains("clash.example/dev=b") && why.contains("clash.yaml") && why.contains("/dev/x"),
        "{why}"
    );

    // A node whose host path is no device.
    write(
        tmp.path(),
        "nonode.yaml",
        "cdiVersion: 0.7.0\nkind: none.example/dev\ndevices:\n\
         - {name: a, containerEdits: {deviceNodes: [{path: /dev/nothing-here}]}}\n",
    );
    let (_, why) = refusal(cdi.apply(&mut base(), &field(&["none.example/dev=a"])));
    assert!(
        why.contains("none.example/dev=a") && why.contains("/dev/nothing-here"),
        "{why}"
    );
}

#[test]
fn spec_files_are_checked() {
    let check = |yaml: &str| serde_yaml_ng::from_str::<spec::SpecFile>(yaml).unwrap().check();
    let ok = "cdiVersion: 0.8.0\nkind: a.example/b\ndevices: [{name: d}]\n";
    assert!(check(ok).is_ok());
    for (bad, why) in [
        (
            "cdiVersion: 0.4.0\nkind: a.example/b\ndevices: [{name: d}]",
            "cdiVersion",
        ),
        (
            "cdiVersion: 1.1.0\nkind: a.example/b\ndevices: [{name: d}]",
            "cdiVersion",
        ),
        ("cdiVersion: 0.5.0\nkind: nokind\ndevices: [{name: d}]", "kind"),
        ("cdiVersion: 0.5.0\nkind: a.example/b\ndevices: []", "no devices"),
        (
            "cdiVersion: 0.5.0\nkind: a.example/b\ndevices: [{name: -d}]",
            "name",
        ),
        (
            "cdiVersion: 0.5.0\nkind: a.example/b\ndevices: [{name: d}, {name: d}]",
            "twice",
        ),
        (
            "cdiVersion: 0.5.0\nkind: a.example/b\ndevices: [{name: d, containerEdits: {env: [NOVALUE]}}]",
            "env",
        ),
        (
            "cdiVersion: 0.5.0\nkind: a.example/b\n\
             devices: [{name: d, containerEdits: {hooks: [{hookName: prestop, path: /h}]}}]",
            "hookName",
        ),
        (
            "cdiVersion: 0.5.0\nkind: a.example/b\n\
             devices: [{name: d, containerEdits: {deviceNodes: [{path: dev/x}]}}]",
            "absolute",
        ),
    ] {
        let e = check(bad).unwrap_err();
        assert!(e.contains(why), "{bad}: {e}");
    }
}

#[test]
fn hooks_go_to_their_lists_and_intel_rdt_is_set() {
    let tmp = tempfile::tempdir().unwrap();
    let hooks: Vec<String> = spec::HOOK_NAMES
        .iter()
        .map(|n| format!("{{hookName: {n}, path: /hooks/{n}}}"))
        .collect();
    write(
        tmp.path(),
        "hooks.yaml",
        &format!(
            "cdiVersion: 0.8.0\nkind: hook.example/h\ncontainerEdits:\n  intelRdt: {{closID: gold, \
             l3CacheSchema: 'L3:0=ff'}}\ndevices:\n- name: all\n  containerEdits:\n    hooks: [{}]\n",
            hooks.join(", ")
        ),
    );
    let cdi = Devices {
        dirs: vec![tmp.path().into()],
    };
    let mut s = base();
    cdi.apply(&mut s, &field(&["hook.example/h=all"])).unwrap();
    let h = s.hooks().clone().unwrap();
    #[allow(deprecated)]
    let prestart = h.prestart();
    for (name, list) in [
        ("prestart", prestart),
        ("createRuntime", h.create_runtime()),
        ("createContainer", h.create_container()),
        ("startContainer", h.start_container()),
        ("poststart", h.poststart()),
        ("poststop", h.poststop()),
    ] {
        let paths: Vec<_> = list.iter().flatten().map(|h| h.path().clone()).collect();
        assert_eq!(paths, [PathBuf::from(format!("/hooks/{name}"))], "{name}");
    }
    let rdt = s.linux().as_ref().unwrap().intel_rdt().clone().unwrap();
    assert_eq!(rdt.clos_id().as_deref(), Some("gold"));
    assert_eq!(rdt.l3_cache_schema().as_deref(), Some("L3:0=ff"));
}
