//! A token issuer for pull tests against a registry in token auth mode (distribution's `auth.token`): a tiny
//! plain-http server on a free 127.0.0.1 port, on a std thread, serving `GET /token?service=…&scope=…`. It
//! demands one user's basic credentials (401 otherwise) and answers with an ES256 JWT granting every action
//! the scopes ask for, signed by a fresh P-256 key whose self-signed certificate travels in the token's `x5c`
//! header; the registry trusts that certificate through its `rootcertbundle` ([`TokenIssuer::root_cert_pem`]).
//! The claims are the ones distribution 2.8 checks: `iss`, `aud` (a string), `exp`/`nbf` and `access`.
//! Stopped when dropped; it keeps nothing on disk.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use ring::rand::SystemRandom;
use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair};
use serde_json::{Value, json};

/// How long an issued token lasts, in seconds.
const LIFETIME: u64 = 300;

/// A running token issuer.
pub struct TokenIssuer {
    addr: SocketAddr,
    cert_pem: String,
    issuer: String,
    service: String,
    state: Arc<State>,
    thread: Option<JoinHandle<()>>,
}

/// What the server thread shares with the owner.
struct State {
    stop: AtomicBool,
    issued: AtomicUsize,
    log: Mutex<Vec<String>>,
}

/// What the server thread needs to answer a request.
struct Signer {
    key: EcdsaKeyPair,
    rng: SystemRandom,
    cert_der: String,
    issuer: String,
    service: String,
    user: String,
    /// `user:password`, the only basic credentials accepted.
    credentials: String,
}

impl TokenIssuer {
    /// Starts an issuer named `issuer` (the tokens' `iss`) handing out tokens for registry `service` (their
    /// `aud`) to `user` with `password`.
    pub fn start(issuer: &str, service: &str, user: &str, password: &str) -> TokenIssuer {
        let key_pair = rcgen::KeyPair::generate().expect("generating a P-256 key");
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("certificate params");
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, format!("{issuer} token signer"));
        let cert = params
            .self_signed(&key_pair)
            .expect("self-signing the certificate");
        let key = EcdsaKeyPair::from_pkcs8(
            &ECDSA_P256_SHA256_FIXED_SIGNING,
            &key_pair.serialize_der(),
            &SystemRandom::new(),
        )
        .expect("loading the key into ring");
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let state = Arc::new(State {
            stop: AtomicBool::new(false),
            issued: AtomicUsize::new(0),
            log: Mutex::new(Vec::new()),
        });
        let signer = Signer {
            key,
            rng: SystemRandom::new(),
            cert_der: STANDARD.encode(cert.der()),
            issuer: issuer.into(),
            service: service.into(),
            user: user.into(),
            credentials: format!("{user}:{password}"),
        };
        let thread = {
            let state = state.clone();
            std::thread::Builder::new()
                .name("token-issuer".into())
                .spawn(move || serve(&listener, &signer, &state))
                .expect("spawning the token issuer")
        };
        TokenIssuer {
            addr,
            cert_pem: cert.pem(),
            issuer: issuer.into(),
            service: service.into(),
            state,
            thread: Some(thread),
        }
    }

    /// The realm to configure in the registry: `http://127.0.0.1:<port>/token`.
    pub fn realm(&self) -> String {
        format!("http://{}/token", self.addr)
    }

    /// The PEM certificate of the signing key, for the registry's `rootcertbundle`.
    pub fn root_cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// The issuer name (the tokens' `iss`).
    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    /// The registry service the tokens are for (their `aud`).
    pub fn service(&self) -> &str {
        &self.service
    }

    /// How many tokens were handed out so far.
    pub fn issued(&self) -> usize {
        self.state.issued.load(Ordering::SeqCst)
    }

    /// One line per request served: the scopes asked for and the answer.
    pub fn log(&self) -> Vec<String> {
        self.state.log.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl Drop for TokenIssuer {
    fn drop(&mut self) {
        self.state.stop.store(true, Ordering::SeqCst);
        // Wakes the accept call up; the thread sees the flag and returns, closing the listener.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Answers connections one at a time, one request each, until told to stop.
fn serve(listener: &TcpListener, signer: &Signer, state: &State) {
    for conn in listener.incoming() {
        if state.stop.load(Ordering::SeqCst) {
            return;
        }
        let Ok(mut conn) = conn else { continue };
        let _ = conn.set_read_timeout(Some(Duration::from_secs(5)));
        let _ = conn.set_write_timeout(Some(Duration::from_secs(5)));
        let Some(head) = read_head(&mut conn) else {
            continue;
        };
        let (status, body, line) = answer(&head, signer, state);
        state.log.lock().unwrap_or_else(|p| p.into_inner()).push(line);
        let reason = match status {
            200 => "OK",
            400 => "Bad Request",
            401 => "Unauthorized",
            _ => "Not Found",
        };
        let challenge = if status == 401 {
            "WWW-Authenticate: Basic realm=\"crius-test-token\"\r\n"
        } else {
            ""
        };
        let body = body.to_string();
        let response = format!(
            "HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{challenge}\
             Connection: close\r\n\r\n{body}",
            body.len()
        );
        let _ = conn.write_all(response.as_bytes());
        let _ = conn.flush();
    }
}

/// Reads the request line and headers (the requests served have no body).
fn read_head(conn: &mut TcpStream) -> Option<String> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = conn.read(&mut chunk).ok()?;
        if n == 0 || buf.len() > 64 * 1024 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Some(String::from_utf8_lossy(&buf).into_owned())
}

/// The status, JSON body and log line for one request.
fn answer(head: &str, signer: &Signer, state: &State) -> (u16, Value, String) {
    let mut lines = head.split("\r\n");
    let request = lines.next().unwrap_or_default();
    let mut parts = request.split(' ');
    let (method, target) = (parts.next().unwrap_or_default(), parts.next().unwrap_or_default());
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let params: Vec<(String, String)> = query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect();
    let scopes: Vec<&str> = params
        .iter()
        .filter(|(k, _)| k == "scope")
        .flat_map(|(_, v)| v.split(' '))
        .filter(|s| !s.is_empty())
        .collect();
    let what = format!("{method} {path} scopes={scopes:?}");
    if method != "GET" || path != "/token" {
        return (404, json!({"details": "not found"}), format!("{what} -> 404"));
    }
    if let Some((_, s)) = params.iter().find(|(k, _)| k == "service")
        && *s != signer.service
    {
        return (
            400,
            json!({"details": "unknown service"}),
            format!("{what} service={s:?} -> 400"),
        );
    }
    let authorized = lines
        .filter_map(|l| l.split_once(':'))
        .filter(|(k, _)| k.trim().eq_ignore_ascii_case("authorization"))
        .filter_map(|(_, v)| v.trim().split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("basic"))
        .any(|(_, b64)| {
            STANDARD
                .decode(b64.trim())
                .is_ok_and(|c| c == signer.credentials.as_bytes())
        });
    if !authorized {
        return (
            401,
            json!({"details": "bad or missing credentials"}),
            format!("{what} -> 401"),
        );
    }
    let mut access = Vec::new();
    for scope in &scopes {
        // `<type>:<name>:<actions>`; a name may itself hold colons, the type and actions do not.
        let (Some((kind, rest)), Some((_, actions))) = (scope.split_once(':'), scope.rsplit_once(':')) else {
            return (400, json!({"details": "bad scope"}), format!("{what} -> 400"));
        };
        let Some((name, _)) = rest.rsplit_once(':') else {
            return (400, json!({"details": "bad scope"}), format!("{what} -> 400"));
        };
        let actions: Vec<&str> = actions.split(',').filter(|a| !a.is_empty()).collect();
        access.push(json!({"type": kind, "name": name, "actions": actions}));
    }
    let token = signer.token(&access);
    state.issued.fetch_add(1, Ordering::SeqCst);
    let issued_at = time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .expect("formatting the time");
    (
        200,
        json!({"token": token, "access_token": token, "expires_in": LIFETIME, "issued_at": issued_at}),
        format!("{what} -> 200"),
    )
}

impl Signer {
    /// A signed JWT granting `access` (a list of `{type, name, actions}`).
    fn token(&self, access: &[Value]) -> String {
        static JTI: AtomicUsize = AtomicUsize::new(0);
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("clock after 1970")
            .as_secs();
        let header = json!({"typ": "JWT", "alg": "ES256", "x5c": [self.cert_der]});
        let claims = json!({
            "iss": self.issuer,
            "sub": self.user,
            "aud": self.service,
            "exp": now + LIFETIME,
            "nbf": now,
            "iat": now,
            "jti": format!("{}-{}", std::process::id(), JTI.fetch_add(1, Ordering::Relaxed)),
            "access": access,
        });
        let signing_input = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(header.to_string()),
            URL_SAFE_NO_PAD.encode(claims.to_string())
        );
        // The fixed (r ‖ s) form is what JOSE's ES256 wants, not the DER one certificates use.
        let sig = self
            .key
            .sign(&self.rng, signing_input.as_bytes())
            .expect("signing the token");
        format!("{signing_input}.{}", URL_SAFE_NO_PAD.encode(sig.as_ref()))
    }
}

/// Decodes a query component: `%XX` escapes and `+` for a space.
fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' => match s.get(i + 1..i + 3).and_then(|h| u8::from_str_radix(h, 16).ok()) {
                Some(v) => {
                    out.push(v);
                    i += 2;
                }
                None => out.push(b'%'),
            },
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}
