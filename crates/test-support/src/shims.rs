//! Finding and cleaning up after `containerd-shim-crius-v2` processes a test started: by a string of their
//! command line (the owner address, unique per test), with the containers they hold deleted first.

use std::path::Path;
use std::process::Command;

use crate::daemon::built_binary;

fn cmdline(pid: i32) -> Vec<String> {
    let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    String::from_utf8_lossy(&cmd)
        .split('\0')
        .map(str::to_string)
        .collect()
}

/// Pids of shim processes whose command line mentions `needle`.
pub fn shim_pids(needle: &str) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_string_lossy().parse::<i32>().ok())
        .filter(|pid| {
            let cmd = cmdline(*pid).join(" ");
            cmd.contains("containerd-shim-crius-v2") && cmd.contains(needle)
        })
        .collect()
}

/// Deletes containers `ids` with crius-runc in the state root the shim gives namespace `namespace`; their
/// processes go with them.
pub fn delete_containers<S: AsRef<std::ffi::OsStr>>(namespace: &str, ids: impl IntoIterator<Item = S>) {
    let root = Path::new("/run/crius/shim/crius-runc").join(namespace);
    for id in ids {
        let _ = Command::new(built_binary("crius-runc"))
            .arg("--root")
            .arg(&root)
            .args(["delete", "--force"])
            .arg(id)
            .output();
    }
}

/// SIGKILLs the shims whose command line mentions `needle`, and removes the sockets they leave behind.
pub fn kill_shims(needle: &str) {
    for pid in shim_pids(needle) {
        let args = cmdline(pid);
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
        if let Some(sock) = args.iter().skip_while(|a| *a != "-socket").nth(1) {
            let _ = std::fs::remove_file(sock.trim_start_matches("unix://"));
        }
    }
}
