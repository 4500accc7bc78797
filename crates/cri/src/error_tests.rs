//! The gRPC code and message each error variant gives a client.

use std::time::Duration;

use tonic::Code;

use super::*;

use super::answer as status;

#[test]
fn invalid_argument_names_the_call_and_field() {
    let e = Error::invalid("ExecSync", "cmd", "is empty");
    assert_eq!(
        status(e),
        (Code::InvalidArgument, "ExecSync: cmd is empty".into())
    );
}

#[test]
fn not_found_quotes_the_id() {
    let e = Error::NotFound {
        call: "ContainerStatus",
        kind: Kind::Container,
        id: "nope".into(),
    };
    assert_eq!(
        status(e),
        (
            Code::NotFound,
            "ContainerStatus: container \"nope\" not found".into()
        )
    );
}

#[test]
fn a_missing_image_says_pull_it_first() {
    let e = Error::ImageNotPulled {
        call: "CreateContainer",
        reference: "busybox".into(),
    };
    let (code, msg) = status(e);
    assert_eq!(code, Code::NotFound);
    assert!(
        msg.contains("\"busybox\"") && msg.ends_with("pull it first"),
        "{msg}"
    );
}

#[test]
fn already_exists_names_the_holder() {
    let e = Error::AlreadyExists {
        call: "RunPodSandbox",
        kind: Kind::Sandbox,
        name: "web_default_u1_0".into(),
        holder: "abc".into(),
    };
    assert_eq!(
        status(e),
        (
            Code::AlreadyExists,
            "RunPodSandbox: web_default_u1_0 is taken by sandbox abc".into()
        )
    );
}

#[test]
fn failed_precondition_and_network_not_ready() {
    let e = Error::FailedPrecondition {
        call: "CreateContainer",
        kind: Kind::Sandbox,
        id: "abc".into(),
        reason: "is not ready".into(),
    };
    assert_eq!(
        status(e),
        (
            Code::FailedPrecondition,
            "CreateContainer: sandbox abc is not ready".into()
        )
    );
    let e = Error::NetworkNotReady {
        call: "RunPodSandbox",
        source: Box::new(NetError::NoConfig("/etc/cni/net.d".into())),
    };
    assert_eq!(
        status(e),
        (
            Code::FailedPrecondition,
            "RunPodSandbox: the pod network is not ready: no network config found in /etc/cni/net.d".into()
        )
    );
}

#[test]
fn deadline_exceeded() {
    let e = Error::DeadlineExceeded {
        call: "StopContainer",
        kind: Kind::Container,
        id: "abc".into(),
        reason: "is still running 60 s after SIGKILL".into(),
    };
    assert_eq!(
        status(e),
        (
            Code::DeadlineExceeded,
            "StopContainer: container abc is still running 60 s after SIGKILL".into()
        )
    );
}

#[test]
fn io_is_internal_with_its_context() {
    let e = Error::io("writing /x/config.json", std::io::Error::other("disk full"));
    assert_eq!(
        status(e),
        (Code::Internal, "writing /x/config.json: disk full".into())
    );
}

#[test]
fn internal_failures_are_logged_and_bad_requests_are_not() {
    #[derive(Clone, Default)]
    struct Log(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);
    impl std::io::Write for Log {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let log = Log::default();
    let w = log.clone();
    let sub = tracing_subscriber::fmt()
        .with_ansi(false)
        .with_writer(move || w.clone())
        .finish();
    tracing::subscriber::with_default(sub, || {
        let _ = status(Error::io(
            "writing /x/config.json",
            std::io::Error::other("disk full"),
        ));
        let _ = status(Error::NotFound {
            call: "ContainerStatus",
            kind: Kind::Container,
            id: "abc".into(),
        });
    });
    let text = String::from_utf8(log.0.lock().unwrap().clone()).unwrap();
    assert!(
        text.contains("WARN") && text.contains("writing /x/config.json: disk full"),
        "{text}"
    );
    assert!(!text.contains("abc"), "{text}");
}

#[test]
fn shim_errors_keep_the_shims_code() {
    let shim = |source| Error::Shim {
        call: "StartContainer",
        id: "abc".into(),
        source,
    };
    let refused = |code| ShimError::Refused {
        code,
        message: "no".into(),
    };
    for (code, want) in [
        (ShimCode::NotFound, Code::NotFound),
        (ShimCode::AlreadyExists, Code::AlreadyExists),
        (ShimCode::FailedPrecondition, Code::FailedPrecondition),
        (ShimCode::InvalidArgument, Code::InvalidArgument),
        (ShimCode::DeadlineExceeded, Code::DeadlineExceeded),
        (ShimCode::Unimplemented, Code::Unimplemented),
        (ShimCode::Other, Code::Internal),
    ] {
        assert_eq!(status(shim(refused(code))).0, want, "{code:?}");
    }
    assert_eq!(status(shim(refused(ShimCode::Other))).1, "StartContainer abc: no");
    let (code, msg) = status(shim(ShimError::Timeout(Duration::from_secs(3))));
    assert_eq!(code, Code::DeadlineExceeded);
    assert!(msg.contains("3s"), "{msg}");
    let (code, msg) = status(shim(ShimError::Unreachable("connection refused".into())));
    assert_eq!(code, Code::Unavailable);
    assert!(
        msg.contains("the pod's shim") && msg.contains("connection refused"),
        "{msg}"
    );
    assert_eq!(
        status(shim(ShimError::Start("no binary".into()))).0,
        Code::Internal
    );
}

#[test]
fn image_errors_keep_the_stores_meaning() {
    use crius_image::Error as E;
    let image = |source| Error::Image {
        call: "PullImage",
        source,
    };
    for (e, want) in [
        (E::InvalidArgument("x".into()), Code::InvalidArgument),
        (E::NotFound("x".into()), Code::NotFound),
        (E::Unauthenticated("x".into()), Code::Unauthenticated),
        (E::Unavailable("x".into()), Code::Unavailable),
        (E::DeadlineExceeded("x".into()), Code::DeadlineExceeded),
        (E::PolicyRefused("x".into()), Code::PermissionDenied),
        (E::Registry("x".into()), Code::Internal),
        (
            E::Io {
                context: "x".into(),
                source: std::io::Error::other("y"),
            },
            Code::Internal,
        ),
    ] {
        assert_eq!(status(image(e)).0, want);
    }
}

#[test]
fn a_missing_path_and_a_failed_task() {
    let e = Error::NoSuchPath {
        call: "Import",
        path: "/nonexistent.tar".into(),
    };
    assert_eq!(
        status(e),
        (Code::NotFound, "Import: /nonexistent.tar does not exist".into())
    );
    let e = Error::TaskFailed {
        call: "ListImages",
        reason: "panicked".into(),
    };
    assert_eq!(
        status(e),
        (
            Code::Internal,
            "ListImages: the call's task failed: panicked".into()
        )
    );
}

#[test]
fn network_events_and_unimplemented() {
    let e = Error::Network {
        call: "RunPodSandbox",
        id: "abc".into(),
        source: Box::new(NetError::io("pinning", std::io::Error::other("no such device"))),
    };
    assert_eq!(
        status(e),
        (
            Code::Internal,
            "RunPodSandbox abc: pinning: no such device".into()
        )
    );
    let e = Error::NriRefused {
        call: "CreateContainer",
        plugin: "10-policy".into(),
        message: "no GPUs here".into(),
    };
    assert_eq!(
        status(e),
        (
            Code::FailedPrecondition,
            "CreateContainer: NRI plugin 10-policy refused: no GPUs here".into()
        )
    );
    let e = Error::Nri {
        call: "CreateContainer",
        reason: "plugins 10-a and 20-b both set linux.resources.cpu.shares".into(),
    };
    assert_eq!(status(e).0, Code::Internal);
    let (code, msg) = status(Error::EventsLost(7));
    assert_eq!(code, Code::DataLoss);
    assert!(msg.starts_with("7 container events"), "{msg}");
    assert_eq!(
        status(Error::Unimplemented("Exec")),
        (
            Code::Unimplemented,
            "crius does not serve RuntimeService/Exec yet".into()
        )
    );
}
