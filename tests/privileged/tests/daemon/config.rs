//! criusd's config file, flags and socket.

use super::*;

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn print_config_shows_the_files_keys_under_the_flags_and_names_what_is_wrong() {
    require_root();
    let criusd = built_binary("criusd");
    // --print-config: the file's keys with flags on top; a missing --config file and unknown keys are named.
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("config.toml");
    std::fs::write(
        &cfg,
        "log_level = \"debug\"\n[image]\ninsecure_registries = [\"reg.test:5000\"]\n",
    )
    .unwrap();
    let out = Command::new(&criusd)
        .arg("--config")
        .arg(&cfg)
        .args([
            "--print-config",
            "--root",
            "/srv/crius",
            "--registry-mirror",
            "docker.io=http://127.0.0.1:1",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for want in [
        "root = \"/srv/crius\"",
        "log_level = \"debug\"",
        "insecure_registries = [\"reg.test:5000\"]",
        "\"docker.io\" = \"http://127.0.0.1:1\"",
        "# default: \"/run/crius/crius.sock\"",
        "listen_mode = 0o660",
    ] {
        assert!(text.contains(want), "{want:?} missing from:\n{text}");
    }
    std::fs::write(&cfg, &*text).unwrap();
    let again = Command::new(&criusd)
        .arg("--config")
        .arg(&cfg)
        .arg("--print-config")
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&again.stdout),
        text,
        "the printed config is a config file"
    );
    let missing = Command::new(&criusd)
        .args(["--config", "/nonexistent/crius.toml", "--print-config"])
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("/nonexistent/crius.toml"));
    std::fs::write(&cfg, "roots = \"/x\"\n").unwrap();
    let bad = Command::new(&criusd)
        .arg("--config")
        .arg(&cfg)
        .arg("--print-config")
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("roots"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
    let bad = Command::new(&criusd)
        .args(["--print-config", "--registry-mirror", "nohost"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&bad.stderr).contains("HOST=MIRROR"));
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn the_socket_is_0660_and_a_second_daemon_on_its_state_or_socket_is_refused() {
    let criusd = built_binary("criusd");
    // The socket is 0660; a second daemon on the same state dir, or on a live socket, is refused.
    let d = Daemon::start(&[]);
    let mode = std::fs::metadata(d.socket()).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o660);
    let second = Command::new(&criusd)
        .arg("--state")
        .arg(d.state())
        .arg("--root")
        .arg(d.root())
        .arg("--listen")
        .arg(d.dir().join("other.sock"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&second.stderr);
    assert!(!second.status.success());
    assert!(
        err.contains("another criusd") && err.contains(&d.pid().to_string()),
        "{err}"
    );
    let other_state = d.dir().join("other-state");
    let third = Command::new(&criusd)
        .arg("--state")
        .arg(&other_state)
        .arg("--root")
        .arg(d.root())
        .arg("--listen")
        .arg(d.socket())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&third.stderr);
    assert!(!third.status.success() && err.contains("in use"), "{err}");
    assert!(
        d.cli(&["images", "ls"]).status.success(),
        "the first daemon still serves"
    );
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn sigterm_removes_the_socket_and_a_stale_one_is_replaced_at_start() {
    let mut d = Daemon::start(&[]);
    // SIGTERM: exit 0, socket removed; the CLI then names the socket it could not reach.
    let st = d.stop().unwrap();
    assert!(st.success(), "criusd exited with {st}: {}", d.log());
    assert!(!d.socket().exists(), "socket removed on shutdown");
    assert!(d.log().contains("shutting down"), "{}", d.log());
    let out = d.cli(&["images", "ls"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains(&d.socket().display().to_string()),
        "{err}"
    );
    // A stale socket file left by a crash is replaced.
    std::os::unix::net::UnixListener::bind(d.socket())
        .map(drop)
        .unwrap();
    d.restart(&[]);
    assert!(d.cli(&["images", "ls"]).status.success());
}
