//! The classification of client failures and the figures taken from the shim's metrics.

use super::*;

#[test]
fn io_is_summed_over_devices_and_psi_carried() {
    use containerd_shim_protos::cgroups_v2::metrics::{IOEntry, PSIData, PSIStats};
    // io.stat's `8:0 rbytes=1459200 wbytes=314773504 rios=192 wios=353` and
    // `253:1 rbytes=800 wbytes=200 rios=8 wios=2`, as the shim sends them.
    let dev = |major, rbytes, wbytes, rios, wios| IOEntry {
        major,
        rbytes,
        wbytes,
        rios,
        wios,
        ..Default::default()
    };
    let io = io_of(&[dev(8, 1459200, 314773504, 192, 353), dev(253, 800, 200, 8, 2)]);
    assert_eq!(
        io,
        Io {
            read_bytes: 1460000,
            write_bytes: 314773704,
            reads: 200,
            writes: 355
        }
    );
    assert_eq!(io_of(&[]), Io::default());
    let p = psi_of(&PSIStats {
        some: Some(PSIData {
            avg10: 2.5,
            total: 9,
            ..Default::default()
        })
        .into(),
        ..Default::default()
    });
    assert_eq!((p.some.avg10, p.some.total), (2.5, 9));
    assert_eq!(p.full, PsiData::default(), "a part the shim left out is zero");
}

#[test]
fn a_late_answer_is_a_timeout_and_a_broken_connection_is_unreachable() {
    let d = Duration::from_secs(2);
    // What the client returns when the deadline passes.
    let late = client::Error::Timeout {
        method: "Kill".into(),
        deadline: d,
    };
    assert!(matches!(classify(late, d), ShimError::Timeout(t) if t == d));
    let gone = client::Error::Closed("the shim closed the connection".into());
    assert!(matches!(classify(gone, d), ShimError::Unreachable(_)));
    let undecodable = client::Error::Protocol("decoding the answer to State: bad".into());
    assert!(matches!(classify(undecodable, d), ShimError::Unreachable(_)));
    let refused = client::Error::Refused {
        code: ttrpc::Code::NOT_FOUND,
        message: "no such task".into(),
    };
    assert!(classify(refused, d).is_not_found());
}

#[test]
fn a_shim_without_a_call_answers_unimplemented() {
    // What an older shim answers crius's ExecSync with.
    let old = client::Error::Refused {
        code: ttrpc::Code::UNIMPLEMENTED,
        message: "/crius.shim.v1.Exec/ExecSync is not served here".into(),
    };
    assert!(matches!(
        classify(old, Duration::from_secs(1)),
        ShimError::Refused {
            code: ShimCode::Unimplemented,
            ..
        }
    ));
}
