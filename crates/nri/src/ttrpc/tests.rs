//! ttrpc over the multiplexer: calls answered, errors as status, timeouts, a connection that dies.

use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::net::UnixStream;

use super::*;
use crate::api;
use crate::mux::{Mux, PLUGIN_CONN, RUNTIME_CONN};

fn echo_handler() -> Handler {
    Arc::new(|service, method, payload| {
        Box::pin(async move {
            match (service.as_str(), method.as_str()) {
                ("test.Echo", "Echo") => Ok(payload),
                ("test.Echo", "Fail") => Err(status(code::UNKNOWN, "no, thanks")),
                ("test.Echo", "Hang") => {
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                    Ok(Vec::new())
                }
                _ => Err(status(code::UNIMPLEMENTED, format!("{service}/{method}"))),
            }
        })
    })
}

/// A client on one end of a socket pair and a server on the other, both on the plugin connection.
fn pair() -> (Client, Mux, Mux) {
    let (a, b) = UnixStream::pair().unwrap();
    let (ma, mut ca) = Mux::new(a, &[PLUGIN_CONN, RUNTIME_CONN]);
    let (mb, mut cb) = Mux::new(b, &[PLUGIN_CONN, RUNTIME_CONN]);
    serve(cb.remove(0), echo_handler());
    (Client::new(ca.remove(0), || {}), ma, mb)
}

const T: Duration = Duration::from_secs(5);

#[tokio::test]
async fn a_call_gets_its_answer_even_a_large_one() {
    let (client, _a, _b) = pair();
    let req = api::RegisterPluginRequest {
        plugin_name: "x".repeat(100_000),
        plugin_idx: "10".into(),
        ..Default::default()
    };
    let got: api::RegisterPluginRequest = client.call("test.Echo", "Echo", &req, T).await.unwrap();
    assert_eq!(got, req);
    let client = Arc::new(client);
    let calls: Vec<_> = (0..10)
        .map(|i| {
            let client = client.clone();
            tokio::spawn(async move {
                let req = api::RegisterPluginRequest {
                    plugin_idx: format!("{i:02}"),
                    ..Default::default()
                };
                client
                    .call::<_, api::RegisterPluginRequest>("test.Echo", "Echo", &req, T)
                    .await
                    .unwrap()
            })
        })
        .collect();
    for (i, call) in calls.into_iter().enumerate() {
        assert_eq!(
            call.await.unwrap().plugin_idx,
            format!("{i:02}"),
            "concurrent calls each get their own answer"
        );
    }
}

#[tokio::test]
async fn errors_come_back_as_status() {
    let (client, _a, _b) = pair();
    let err = client
        .call::<_, api::Empty>("test.Echo", "Fail", &api::Empty {}, T)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::Status { code: 2, message, .. } if message == "no, thanks"),
        "{err}"
    );
    let err = client
        .call::<_, api::Empty>("test.Other", "X", &api::Empty {}, T)
        .await
        .unwrap_err();
    assert!(matches!(
        err,
        Error::Status {
            code: code::UNIMPLEMENTED,
            ..
        }
    ));
}

#[tokio::test]
async fn a_call_times_out_and_a_dead_peer_closes() {
    let (client, _a, b) = pair();
    let err = client
        .call::<_, api::Empty>("test.Echo", "Hang", &api::Empty {}, Duration::from_millis(50))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }), "{err}");
    let call = client.call::<_, api::Empty>("test.Echo", "Hang", &api::Empty {}, T);
    let kill = async {
        tokio::time::sleep(Duration::from_millis(50)).await;
        b.close().await;
    };
    let (err, ()) = tokio::join!(call, kill);
    assert!(matches!(err.unwrap_err(), Error::Closed));
    assert!(client.is_closed());
}

/// A request frame as Go's ttrpc client writes one for a unary call: length, odd stream id 1, type 1, no flags.
#[tokio::test]
async fn request_frames_match_ttrpc() {
    let (a, mut b) = UnixStream::pair().unwrap();
    let (_ma, mut ca) = Mux::new(a, &[PLUGIN_CONN]);
    let client = Client::new(ca.remove(0), || {});
    let call = client.call::<_, api::Empty>("s", "m", &api::Empty {}, Duration::from_millis(100));
    let read = async {
        let mut buf = [0u8; 8 + 10];
        b.read_exact(&mut buf).await.unwrap();
        buf
    };
    let (_, buf) = tokio::join!(call, read);
    let len = u32::from_be_bytes(buf[8..12].try_into().unwrap());
    assert_eq!(&buf[12..18], &[0, 0, 0, 1, 1, 0]);
    let mut payload = vec![0u8; len as usize];
    b.read_exact(&mut payload).await.unwrap();
    let req = wire::Request::decode(payload.as_slice()).unwrap();
    assert_eq!(
        (req.service.as_str(), req.method.as_str(), req.timeout_nano),
        ("s", "m", 100_000_000)
    );
}

#[test]
fn oversized_messages_are_refused() {
    assert!(matches!(
        encode(1, TYPE_REQUEST, 0, &vec![0; MAX_MESSAGE + 1]),
        Err(Error::Oversized { .. })
    ));
    assert_eq!(
        encode(3, TYPE_RESPONSE, 0, b"ab").unwrap(),
        [0, 0, 0, 2, 0, 0, 0, 3, 2, 0, b'a', b'b']
    );
}

/// A raw ttrpc frame with a header announcing `len` bytes and `body` as what follows.
fn raw_frame(len: usize, stream: u32, kind: u8, body: &[u8]) -> Vec<u8> {
    let mut out = (len as u32).to_be_bytes().to_vec();
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(&[kind, 0]);
    out.extend_from_slice(body);
    out
}

fn echo_request() -> Vec<u8> {
    wire::Request {
        service: "test.Echo".into(),
        method: "Echo".into(),
        payload: b"after".to_vec(),
        ..Default::default()
    }
    .encode_to_vec()
}

/// A request longer than ttrpc's 4 MiB is answered ResourceExhausted on its stream, as Go's ttrpc server
/// answers it; its payload is skipped, not kept, and the next request on the connection is served.
#[tokio::test]
async fn an_oversized_request_is_answered_resource_exhausted() {
    let (a, b) = UnixStream::pair().unwrap();
    let (_ma, mut ca) = Mux::new(a, &[PLUGIN_CONN]);
    let (_mb, mut cb) = Mux::new(b, &[PLUGIN_CONN]);
    serve(cb.remove(0), echo_handler());
    let peer = ca.remove(0);
    let len = MAX_MESSAGE + 1;
    let mut big = raw_frame(len, 1, TYPE_REQUEST, &vec![0xab; len]);
    big.extend_from_slice(&encode(3, TYPE_REQUEST, 0, &echo_request()).unwrap());
    peer.tx.send(&big).await.unwrap();
    let mut frames = Frames::new(peer.rx);
    let Some(Incoming::Frame(f)) = frames.next().await.unwrap() else {
        panic!("no answer")
    };
    assert_eq!((f.stream, f.kind), (1, TYPE_RESPONSE));
    let s = wire::Response::decode(f.payload.as_slice())
        .unwrap()
        .status
        .unwrap();
    assert_eq!(s.code, code::RESOURCE_EXHAUSTED);
    assert!(
        s.message.contains(&len.to_string()) && s.message.contains(&MAX_MESSAGE.to_string()),
        "{}",
        s.message
    );
    let Some(Incoming::Frame(f)) = frames.next().await.unwrap() else {
        panic!("no answer to the next request")
    };
    assert_eq!(f.stream, 3);
    assert_eq!(
        wire::Response::decode(f.payload.as_slice()).unwrap().payload,
        b"after"
    );
}

/// An answer longer than ttrpc's 4 MiB fails its call with Oversized (Go's client: ResourceExhausted); its
/// payload is skipped and the connection goes on.
#[tokio::test]
async fn an_oversized_answer_fails_its_call_only() {
    let (a, b) = UnixStream::pair().unwrap();
    let (_ma, mut ca) = Mux::new(a, &[PLUGIN_CONN]);
    let (_mb, mut cb) = Mux::new(b, &[PLUGIN_CONN]);
    let client = Client::new(ca.remove(0), || {});
    let peer = cb.remove(0);
    let server = tokio::spawn(async move {
        let mut frames = Frames::new(peer.rx);
        let Some(Incoming::Frame(first)) = frames.next().await.unwrap() else {
            panic!("no request")
        };
        let len = MAX_MESSAGE + 100;
        peer.tx
            .send(&raw_frame(len, first.stream, TYPE_RESPONSE, &vec![1; len]))
            .await
            .unwrap();
        let Some(Incoming::Frame(second)) = frames.next().await.unwrap() else {
            panic!("no second request")
        };
        let ok = wire::Response {
            status: None,
            payload: Vec::new(),
        };
        peer.tx
            .send(&encode(second.stream, TYPE_RESPONSE, 0, &ok.encode_to_vec()).unwrap())
            .await
            .unwrap();
        frames
    });
    let err = client
        .call::<_, api::Empty>("s", "m", &api::Empty {}, T)
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Oversized { len, max: MAX_MESSAGE } if len == MAX_MESSAGE + 100),
        "{err}"
    );
    client
        .call::<_, api::Empty>("s", "m", &api::Empty {}, T)
        .await
        .expect("the next call is answered");
    assert!(!client.is_closed());
    drop(server.await.unwrap());
}

/// A plugin that floods a served connection with calls that do not end: 64 run, the connection is no longer
/// read, and once the multiplexer's budget is passed the stream is closed; the peer's writes fail.
#[tokio::test]
async fn a_flood_of_calls_is_cut_off_at_the_budget() {
    const BUDGET: usize = 256 << 10;
    let (a, mut b) = UnixStream::pair().unwrap();
    let (_ma, mut ca) = Mux::with_budget(a, &[PLUGIN_CONN], BUDGET);
    let task = serve(ca.remove(0), echo_handler());
    let hang = wire::Request {
        service: "test.Echo".into(),
        method: "Hang".into(),
        payload: vec![0; 1000],
        ..Default::default()
    }
    .encode_to_vec();
    let mut sent = 0usize;
    let mut stream = 1u32;
    let err = loop {
        let frame = encode(stream, TYPE_REQUEST, 0, &hang).unwrap();
        let mut out = PLUGIN_CONN.to_be_bytes().to_vec();
        out.extend_from_slice(&(frame.len() as u32).to_be_bytes());
        out.extend_from_slice(&frame);
        match tokio::io::AsyncWriteExt::write_all(&mut b, &out).await {
            Ok(()) => sent += out.len(),
            Err(e) => break e,
        }
        stream += 2;
        assert!(
            sent < 64 << 20,
            "64 MiB of calls sent and the peer is not cut off"
        );
    };
    assert!(
        matches!(
            err.kind(),
            std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset
        ),
        "{err}"
    );
    assert!(
        (stream as usize / 2) > MAX_IN_FLIGHT,
        "cut off after {} calls",
        stream / 2
    );
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("the server ends with the stream")
        .unwrap();
}
