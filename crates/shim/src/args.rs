//! The shim's command line, as containerd passes it (Go flag syntax: `-name value` or `-name=value`):
//! `-namespace NS -address SOCK -publish-binary BIN -id ID [-bundle DIR] [-socket unix://…] [-debug] [start|delete]`.

use crate::error::{Error, Result};

/// Parsed flags.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Flags {
    /// containerd namespace.
    pub(crate) namespace: String,
    /// containerd's gRPC address (part of the socket name, as containerd's own shims derive it).
    pub(crate) address: String,
    /// containerd's binary, used by Go shims to publish events; unused here (we publish over ttrpc).
    pub(crate) publish_binary: String,
    /// Task (container) id.
    pub(crate) id: String,
    /// Bundle directory (`delete`); `start` runs in the bundle.
    pub(crate) bundle: String,
    /// The socket to serve on (the serving process only).
    pub(crate) socket: String,
    /// Debug logging.
    pub(crate) debug: bool,
    /// `start`, `delete`, or empty (serve).
    pub(crate) action: String,
    /// `-v`: print the version and exit.
    pub(crate) version: bool,
}

/// Parses `args` (without the program name).
pub(crate) fn parse(args: impl IntoIterator<Item = String>) -> Result<Flags> {
    let mut f = Flags::default();
    let mut it = args.into_iter();
    while let Some(arg) = it.next() {
        let Some(flag) = arg.strip_prefix("--").or_else(|| arg.strip_prefix('-')) else {
            if !f.action.is_empty() {
                return Err(Error::InvalidArgument(format!(
                    "unexpected argument {arg:?} after {:?}",
                    f.action
                )));
            }
            f.action = arg;
            continue;
        };
        let (name, inline) = match flag.split_once('=') {
            Some((n, v)) => (n, Some(v.to_string())),
            None => (flag, None),
        };
        let mut value = || {
            inline
                .clone()
                .or_else(|| it.next())
                .ok_or_else(|| Error::InvalidArgument(format!("flag -{name} needs a value")))
        };
        match name {
            "namespace" => f.namespace = value()?,
            "address" => f.address = value()?,
            "publish-binary" => f.publish_binary = value()?,
            "id" => f.id = value()?,
            "bundle" => f.bundle = value()?,
            "socket" => f.socket = value()?,
            "debug" => f.debug = inline.as_deref() != Some("false"),
            "v" | "version" => f.version = true,
            other => return Err(Error::InvalidArgument(format!("unknown flag -{other}"))),
        }
    }
    Ok(f)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn parses_what_containerd_passes() {
        let f = parse(args(
            "-namespace k8s.io -address /run/c.sock -publish-binary /usr/bin/containerd -id abc -debug start",
        ))
        .unwrap();
        assert_eq!(f.namespace, "k8s.io");
        assert_eq!(f.address, "/run/c.sock");
        assert_eq!(f.id, "abc");
        assert!(f.debug);
        assert_eq!(f.action, "start");
        let f = parse(args("--id=x -bundle /b delete")).unwrap();
        assert_eq!(
            (f.id.as_str(), f.bundle.as_str(), f.action.as_str()),
            ("x", "/b", "delete")
        );
        assert!(parse(args("-bogus 1")).unwrap_err().to_string().contains("bogus"));
        let e = parse(args("-id")).unwrap_err();
        assert!(
            matches!(&e, Error::InvalidArgument(m) if m == "flag -id needs a value"),
            "{e:?}"
        );
    }
}
