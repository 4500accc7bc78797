//! Shim socket addresses: where a pod's shim listens (a name derived from its owner, namespace and pod, in
//! the shim socket directory), the socket path an address names, and that directory kept private (as the
//! runtime's state directories are, with the same call).

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// Where shim sockets live (the shims' and their console sockets).
pub(crate) const SOCKET_DIR: &str = "/run/crius/s";

/// The address of the shim serving `pod` (the pod's sandbox id, or a container's own id when it has no pod)
/// for the owner at `owner` (criusd's or containerd's socket) in `namespace`. The shim's `start` action
/// returns the same; calling this instead finds the shim of a pod without starting one.
pub fn socket_address(owner: &str, namespace: &str, pod: &str) -> String {
    let h = Sha256::digest(format!("{owner}/{namespace}/{pod}").as_bytes());
    let hex: String = h.iter().map(|b| format!("{b:02x}")).collect();
    format!("unix://{SOCKET_DIR}/{hex}")
}

/// What an address (`unix:///path`, `unix://@name`, or a bare path) names: the path, or `@name` for an
/// abstract socket.
pub(crate) fn without_scheme(address: &str) -> &str {
    address.strip_prefix("unix://").unwrap_or(address)
}

/// The socket path of `address` (`unix:///path` or a bare path).
pub(crate) fn socket_path(address: &str) -> PathBuf {
    PathBuf::from(without_scheme(address))
}

/// Makes `dir` (a directory of sockets: the shims', their console sockets; or of the runtime's state) 0700, an
/// existing one tightened: nobody but root reaches what is in it.
pub(crate) fn private_dir(dir: &Path) -> crate::error::Result<()> {
    crius_common::private::dir_all_tightened(dir).map_err(crate::error::Error::io(format!(
        "creating {} (0700)",
        dir.display()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_s_address_is_fixed_by_owner_namespace_and_pod() {
        let a = socket_address("/run/crius/crius.sock", "k8s.io", "pod1");
        assert_eq!(a, socket_address("/run/crius/crius.sock", "k8s.io", "pod1"));
        assert_ne!(a, socket_address("/run/crius/crius.sock", "k8s.io", "pod2"));
        assert_ne!(a, socket_address("/run/crius/crius.sock", "default", "pod1"));
        assert_ne!(
            a,
            socket_address("/run/containerd/containerd.sock", "k8s.io", "pod1")
        );
        let path = socket_path(&a);
        assert_eq!(path.parent(), Some(Path::new(SOCKET_DIR)));
        assert_eq!(path.file_name().unwrap().len(), 64, "{a}");
    }

    #[test]
    fn the_scheme_is_optional_and_an_abstract_name_is_kept() {
        assert_eq!(socket_path("unix:///run/x.sock"), Path::new("/run/x.sock"));
        assert_eq!(socket_path("/run/x.sock"), Path::new("/run/x.sock"));
        assert_eq!(without_scheme("unix://@shim"), "@shim");
    }
}
