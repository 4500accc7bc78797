//! The config file and flags: defaults, overrides, checks and the rendered file.

use super::*;

#[test]
fn rendered_config_parses_back_to_itself() {
    let mut c = Config::default();
    assert_eq!(toml::from_str::<Config>(&c.render()).unwrap(), c);
    c.image
        .mirrors
        .insert("docker.io".into(), "http://127.0.0.1:5000".into());
    c.image.insecure_registries.push("reg.local:5000".into());
    c.image.pull_progress_timeout = 7;
    c.image.max_concurrent_downloads = 5;
    c.log_level = "debug".into();
    let text = c.render();
    assert_eq!(toml::from_str::<Config>(&text).unwrap(), c);
    assert!(text.contains("# default: \"/var/lib/crius\""), "{text}");
}

#[test]
fn unknown_keys_and_bad_values_are_named() {
    let e = toml::from_str::<Config>("roots = \"/x\"")
        .unwrap_err()
        .to_string();
    assert!(e.contains("roots"), "{e}");
    let c = Config {
        log_format: "yaml".into(),
        ..Config::default()
    };
    assert!(c.check().unwrap_err().contains("yaml"));
    let c = Config {
        root: "relative".into(),
        ..Config::default()
    };
    assert!(c.check().unwrap_err().contains("root relative"));
    let mut c = Config::default();
    assert_eq!(c.cni().plugin_timeout, std::time::Duration::from_secs(60));
    c.network.cni_plugin_timeout = 0;
    assert!(c.check().unwrap_err().contains("cni_plugin_timeout"));
}

#[test]
fn the_stream_section_is_checked_and_documented() {
    let mut c = Config::default();
    let sc = c.stream_config().unwrap();
    assert_eq!(sc.address.to_string(), "127.0.0.1:0");
    assert_eq!(sc.idle_timeout, std::time::Duration::from_secs(4 * 3600));
    assert!(sc.tls.is_none());
    assert!(c.render().contains("[stream]\n"), "{}", c.render());
    c.stream.address = "localhost".into();
    assert!(c.check().unwrap_err().contains("stream address \"localhost\""));
    c.stream.address = "0.0.0.0".into();
    c.stream.tls_cert = "/etc/crius/stream.pem".into();
    assert!(
        c.check()
            .unwrap_err()
            .contains("tls_cert and tls_key go together")
    );
    c.stream.tls_key = "/etc/crius/stream.key".into();
    c.stream.port = 10010;
    let sc = c.stream_config().unwrap();
    assert_eq!(sc.address.to_string(), "0.0.0.0:10010");
    assert!(sc.tls.is_some());
    assert_eq!(toml::from_str::<Config>(&c.render()).unwrap(), c);
}

#[test]
fn the_metrics_address_is_off_by_default_and_checked() {
    let mut c = Config::default();
    assert_eq!(c.metrics_address(), Ok(None));
    assert!(c.render().contains("metrics_address = \"\"\n"), "{}", c.render());
    c.metrics_address = "localhost:9090".into();
    assert!(
        c.check()
            .unwrap_err()
            .contains("metrics_address \"localhost:9090\"")
    );
    c.metrics_address = "127.0.0.1:9090".into();
    assert_eq!(c.metrics_address().unwrap().unwrap().port(), 9090);
    assert_eq!(toml::from_str::<Config>(&c.render()).unwrap(), c);
}

#[test]
fn the_cgroup_driver_is_cgroupfs_by_default_and_checked() {
    use crius_cri::cgroup_driver::Driver;
    let mut c = Config::default();
    assert_eq!(c.runtime.cgroup_driver(), Ok(Driver::Cgroupfs));
    assert!(
        c.render().contains("cgroup_driver = \"cgroupfs\"\n"),
        "{}",
        c.render()
    );
    c.runtime.cgroup_driver = "systemd".into();
    assert_eq!(c.runtime.cgroup_driver(), Ok(Driver::Systemd));
    assert_eq!(toml::from_str::<Config>(&c.render()).unwrap(), c);
    let roots = |root: &str| {
        let mut c = c.clone();
        c.pods.cgroup_root = root.into();
        c.check().map(|()| c.pods.cgroup_root(Driver::Systemd).unwrap())
    };
    assert_eq!(roots("/kubepods"), Ok(Some("kubepods.slice".into())));
    assert_eq!(roots("crius.slice"), Ok(Some("crius.slice".into())));
    assert!(roots("/other").unwrap_err().contains("wants a slice name"));
    c.runtime.cgroup_driver = "system".into();
    let e = c.check().unwrap_err();
    assert!(e.contains("[runtime] cgroup driver \"system\""), "{e}");
}

#[test]
fn pod_cgroup_parents_may_be_confined_to_a_root() {
    let mut c = Config::default();
    assert_eq!(c.runtime.cgroup_parent_root, "/");
    assert!(c.runtime.cgroup_parent_root().unwrap().is_any());
    c.runtime.cgroup_parent_root = "/kubepods".into();
    c.check().unwrap();
    assert_eq!(toml::from_str::<Config>(&c.render()).unwrap(), c);
    assert!(c.render().contains("cgroup_parent_root = \"/kubepods\""));
    // The pod service's own pods must be within it.
    c.pods.cgroup_root = "/other".into();
    let e = c.check().unwrap_err();
    assert!(
        e.contains("[pods] cgroup_root") && e.contains("cgroup_parent_root"),
        "{e}"
    );
    c.pods.cgroup_root = "/kubepods".into();
    c.runtime.cgroup_driver = "systemd".into();
    let e = c.check().unwrap_err();
    assert!(
        e.contains("cgroup_parent_root \"/kubepods\"") && e.contains("slice"),
        "{e}"
    );
    c.runtime.cgroup_parent_root = "kubepods.slice".into();
    c.check().unwrap();
}

#[test]
fn the_socket_group_is_a_name_or_a_number() {
    let mut c = Config::default();
    assert_eq!(c.listen_gid(), Ok(None));
    c.listen_group = "0".into();
    assert_eq!(c.listen_gid(), Ok(Some(0)));
    c.listen_group = "root".into();
    assert_eq!(c.listen_gid(), Ok(Some(0)));
    assert_eq!(toml::from_str::<Config>(&c.render()).unwrap(), c);
    c.listen_group = "crius-no-such-group".into();
    let e = c.check().unwrap_err();
    assert!(
        e.contains("listen_group \"crius-no-such-group\": no such group"),
        "{e}"
    );
}

#[test]
fn http_mirrors_are_insecure() {
    let mut c = Config::default();
    c.image
        .mirrors
        .insert("docker.io".into(), "http://127.0.0.1:5000/".into());
    c.image
        .mirrors
        .insert("quay.io".into(), "mirror.example:443".into());
    let ic = c.image_config().unwrap();
    assert_eq!(ic.mirrors["docker.io"], "127.0.0.1:5000");
    assert_eq!(ic.insecure, vec!["127.0.0.1:5000".to_string()]);
    assert_eq!(ic.mirrors["quay.io"], "mirror.example:443");
}

#[test]
fn pull_progress_timeout_and_concurrent_downloads_reach_the_image_service() {
    let c = Config::default();
    let ic = c.image_config().unwrap();
    assert_eq!(
        ic.pull_progress_timeout,
        Some(std::time::Duration::from_secs(300))
    );
    assert_eq!(ic.max_concurrent_downloads, 3);
    let c: Config =
        toml::from_str("[image]\npull_progress_timeout = 2\nmax_concurrent_downloads = 1\n").unwrap();
    c.check().unwrap();
    let ic = c.image_config().unwrap();
    assert_eq!(ic.pull_progress_timeout, Some(std::time::Duration::from_secs(2)));
    assert_eq!(ic.max_concurrent_downloads, 1);
    let off: Config = toml::from_str("[image]\npull_progress_timeout = 0\n").unwrap();
    assert_eq!(
        off.image_config().unwrap().pull_progress_timeout,
        None,
        "0: never"
    );
    let policy: Config =
        toml::from_str("[image]\nsignature_policy = \"/nonexistent/policy.json\"\n").unwrap();
    assert!(policy.check().unwrap_err().contains("/nonexistent/policy.json"));
    let none: Config = toml::from_str("[image]\nmax_concurrent_downloads = 0\n").unwrap();
    assert!(none.check().unwrap_err().contains("max_concurrent_downloads"));
}
