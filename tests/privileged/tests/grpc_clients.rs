//! criusd and the gRPC clients around it: Python's grpcio, both Debian's (1.51) and PyPI's current (1.85, in the
//! tests' own virtual environment that hack/install-deps.sh makes), each with its default `:authority` for a
//! unix socket (1.85's is the socket path, percent-encoded) and with one that is no URI authority at all.

use std::path::Path;
use std::process::Command;

use crius_test_support::daemon::Daemon;

/// The virtual environment hack/install-deps.sh makes with PyPI's grpcio 1.85.
const VENV_PYTHON: &str = "/opt/crius-test/grpcio-venv/bin/python3";

fn raw_client(python: &str, d: &Daemon, authority: Option<&str>) -> Vec<String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("interop/raw_client.py");
    let out = Command::new(python)
        .arg(script)
        .arg(d.socket())
        .args(authority)
        .output()
        .unwrap_or_else(|e| panic!("running {python}: {e}"));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{python} (authority {authority:?}): {said}{}\ncriusd's log:\n{}",
        String::from_utf8_lossy(&out.stderr),
        d.log()
    );
    said.lines().map(str::to_owned).collect()
}

#[test]
#[ignore = "needs root, Debian's python3-grpcio and hack/install-deps.sh's grpcio venv: run through hack/test.sh"]
fn python_grpcio_old_and_new_call_criusd_with_any_authority() {
    assert!(
        Path::new(VENV_PYTHON).exists(),
        "{VENV_PYTHON} is missing: run hack/install-deps.sh (it makes the venv with PyPI's grpcio 1.85)"
    );
    let d = Daemon::start(&[]);
    for (python, version) in [(VENV_PYTHON, "1.85."), ("/usr/bin/python3", "1.")] {
        for authority in [None, Some("odd authority%/x:y:z")] {
            let said = raw_client(python, &d, authority);
            assert!(
                said.first()
                    .is_some_and(|l| l.starts_with(&format!("grpcio {version}"))),
                "{python}: {said:?}"
            );
            assert_eq!(
                said[1..],
                ["version crius v1", "containers 0"],
                "{python} (authority {authority:?})"
            );
        }
    }
}
