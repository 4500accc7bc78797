//! A real registry for pull tests: Debian's `docker-registry` (distribution 2.8) serving plain http on a free
//! 127.0.0.1 port with its storage in a temp dir, filled with `skopeo copy` (or, for OCI artifacts, a
//! small client of its own: [`Registry::push_artifact`]); open, or demanding basic auth
//! (htpasswd), or bearer tokens from a [`TokenIssuer`] it owns. Stopped (and its data removed) when dropped.
//! And a [`HostileRegistry`] whose manifests are endless, for the attack tests.

use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::token::TokenIssuer;

/// A running registry.
pub struct Registry {
    child: Child,
    dir: tempfile::TempDir,
    /// `127.0.0.1:<port>`.
    pub host: String,
    /// `user:password` when the registry asks for credentials (basic auth, or to get a token with).
    creds: Option<String>,
    /// The token issuer the registry sends clients to, in token mode.
    issuer: Option<TokenIssuer>,
}

/// How a registry tells who is asking.
enum Access<'a> {
    /// Anyone may push and pull.
    Open,
    /// htpasswd: basic credentials on every request.
    Basic(&'a str, &'a str),
    /// token: bearer tokens, which a [`TokenIssuer`] hands out for these basic credentials.
    Token(&'a str, &'a str),
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

/// Runs `docker-registry serve <dir>/config.yml`, appending its log to `<dir>/registry.log`.
fn spawn(dir: &Path) -> Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("registry.log"))
        .expect("registry log");
    Command::new(crate::which("docker-registry"))
        .arg("serve")
        .arg(dir.join("config.yml"))
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("starting docker-registry")
}

impl Registry {
    /// Starts a registry open to anyone; fails loudly when docker-registry is not installed.
    pub fn start() -> Registry {
        Self::start_with(Access::Open)
    }

    /// Starts a registry that demands basic auth (its htpasswd mode, the file made by `htpasswd -B`).
    pub fn start_with_basic_auth(user: &str, password: &str) -> Registry {
        Self::start_with(Access::Basic(user, password))
    }

    /// Starts a registry in token mode: it answers 401 with a `Bearer realm=…,service=…` challenge and takes the
    /// tokens of a [`TokenIssuer`] started with it, which gives them to `user` with `password`.
    pub fn start_with_token_auth(user: &str, password: &str) -> Registry {
        Self::start_with(Access::Token(user, password))
    }

    fn start_with(access: Access<'_>) -> Registry {
        crate::which("docker-registry");
        let dir = tempfile::Builder::new()
            .prefix("crius-registry-")
            .tempdir()
            .expect("tempdir");
        let port = free_port();
        let host = format!("127.0.0.1:{port}");
        let mut config = format!(
            "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: {host}\n",
            dir.path().join("data").display()
        );
        let (creds, issuer) = match access {
            Access::Open => (None, None),
            Access::Basic(user, password) => {
                let out = Command::new(crate::which("htpasswd"))
                    .args(["-Bbn", user, password])
                    .output()
                    .expect("htpasswd");
                assert!(
                    out.status.success(),
                    "htpasswd: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
                std::fs::write(dir.path().join("htpasswd"), &out.stdout).expect("htpasswd file");
                config += &format!(
                    "auth:\n  htpasswd:\n    realm: crius-test\n    path: {}\n",
                    dir.path().join("htpasswd").display()
                );
                (Some(format!("{user}:{password}")), None)
            }
            Access::Token(user, password) => {
                let issuer = TokenIssuer::start("crius-test-issuer", "crius-test-registry", user, password);
                let bundle = dir.path().join("token-root.pem");
                std::fs::write(&bundle, issuer.root_cert_pem()).expect("token root certificate");
                config += &format!(
                    "auth:\n  token:\n    realm: {}\n    service: {}\n    issuer: {}\n    rootcertbundle: {}\n",
                    issuer.realm(),
                    issuer.service(),
                    issuer.issuer(),
                    bundle.display()
                );
                (Some(format!("{user}:{password}")), Some(issuer))
            }
        };
        std::fs::write(dir.path().join("config.yml"), config).expect("registry config");
        let child = spawn(dir.path());
        let r = Registry {
            child,
            dir,
            host,
            creds,
            issuer,
        };
        r.wait_listening();
        r
    }

    /// Where the registry keeps the bytes of blob `digest` (`sha256:…`), to break or restore it in tests.
    pub fn blob_data(&self, digest: &str) -> std::path::PathBuf {
        let hex = digest.trim_start_matches("sha256:");
        self.dir
            .path()
            .join("data/docker/registry/v2/blobs/sha256")
            .join(&hex[..2])
            .join(hex)
            .join("data")
    }

    /// The token issuer of a registry in token mode.
    pub fn token_issuer(&self) -> Option<&TokenIssuer> {
        self.issuer.as_ref()
    }

    /// The registry's log.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("registry.log")).unwrap_or_default()
    }

    /// Pushes image `name` of the OCI layout at `layout` as `<host>/<repo_tag>` with skopeo.
    pub fn push(&self, layout: &Path, name: &str, repo_tag: &str) {
        let mut cmd = Command::new(crate::which("skopeo"));
        cmd.args(["copy", "--quiet", "--all", "--dest-tls-verify=false"]);
        if let Some(c) = &self.creds {
            cmd.arg("--dest-creds").arg(c);
        }
        let out = cmd
            .arg(format!("oci:{}:{name}", layout.display()))
            .arg(format!("docker://{}/{repo_tag}", self.host))
            .output()
            .expect("running skopeo");
        assert!(
            out.status.success(),
            "skopeo push {repo_tag}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Pushes an OCI artifact of `artifact_type` as `<host>/<repo>:<tag>` with a client of its own (plain
    /// HTTP/1.1, the distribution API's monolithic upload): the empty config, and one layer for each
    /// `(title, media type, bytes)`, annotated with its title unless that is empty. Returns the manifest's
    /// digest. For an open registry, or one asking for basic auth.
    pub fn push_artifact(
        &self,
        repo: &str,
        tag: &str,
        artifact_type: &str,
        layers: &[(&str, &str, &[u8])],
    ) -> String {
        let empty = b"{}";
        let mut descs = Vec::new();
        self.upload(repo, empty);
        for (title, media_type, bytes) in layers {
            let digest = self.upload(repo, bytes);
            let mut d = serde_json::json!({"mediaType": media_type, "digest": digest, "size": bytes.len()});
            if !title.is_empty() {
                d["annotations"] = serde_json::json!({"org.opencontainers.image.title": title});
            }
            descs.push(d);
        }
        let manifest = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "artifactType": artifact_type,
            "config": {"mediaType": "application/vnd.oci.empty.v1+json", "digest": sha256(empty), "size": 2},
            "layers": descs,
        });
        self.put_manifest(repo, tag, &manifest)
    }

    /// Pushes OCI manifest `manifest` as `<repo>:<tag>` (its blobs uploaded before); its digest.
    pub fn put_manifest(&self, repo: &str, tag: &str, manifest: &serde_json::Value) -> String {
        self.put_manifest_as(repo, tag, "application/vnd.oci.image.manifest.v1+json", manifest)
    }

    /// Pushes `manifest` (a manifest or index of `media_type`) as `<repo>:<tag>`, or by digest where `tag` is
    /// one; its digest.
    pub fn put_manifest_as(
        &self,
        repo: &str,
        tag: &str,
        media_type: &str,
        manifest: &serde_json::Value,
    ) -> String {
        let body = serde_json::to_vec(manifest).expect("manifest");
        let (status, _) = self.http(
            "PUT",
            &format!("/v2/{repo}/manifests/{tag}"),
            Some(media_type),
            &body,
        );
        assert_eq!(
            status,
            201,
            "pushing the manifest of {repo}:{tag}: {}",
            self.log()
        );
        sha256(&body)
    }

    /// Uploads `bytes` as a blob of `repo` (POST, then PUT with its digest); its digest.
    pub fn upload(&self, repo: &str, bytes: &[u8]) -> String {
        let digest = sha256(bytes);
        let (status, headers) = self.http("POST", &format!("/v2/{repo}/blobs/uploads/"), None, b"");
        assert_eq!(status, 202, "starting an upload to {repo}: {}", self.log());
        let location = headers
            .iter()
            .find_map(|(k, v)| k.eq_ignore_ascii_case("location").then_some(v.clone()))
            .expect("upload location");
        // The location may be absolute (http://host/...) or a path.
        let path = match location.split_once("://") {
            Some((_, rest)) => rest[rest.find('/').unwrap_or(rest.len())..].to_string(),
            None => location,
        };
        let sep = if path.contains('?') { '&' } else { '?' };
        let (status, _) = self.http(
            "PUT",
            &format!("{path}{sep}digest={digest}"),
            Some("application/octet-stream"),
            bytes,
        );
        assert_eq!(status, 201, "uploading {digest} to {repo}: {}", self.log());
        digest
    }

    /// One request on a connection of its own: the status and the headers of the answer.
    fn http(
        &self,
        method: &str,
        path: &str,
        content_type: Option<&str>,
        body: &[u8],
    ) -> (u16, Vec<(String, String)>) {
        use std::io::{BufRead, BufReader, Read, Write};
        let mut conn = TcpStream::connect(&self.host).expect("connecting to the registry");
        let mut head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nContent-Length: {}\r\nConnection: close\r\n",
            self.host,
            body.len()
        );
        if let Some(t) = content_type {
            head += &format!("Content-Type: {t}\r\n");
        }
        if let (Some(c), None) = (&self.creds, &self.issuer) {
            use base64::Engine as _;
            let basic = base64::engine::general_purpose::STANDARD.encode(c);
            head += &format!("Authorization: Basic {basic}\r\n");
        }
        head += "\r\n";
        conn.write_all(head.as_bytes())
            .and_then(|_| conn.write_all(body))
            .expect("sending");
        let mut r = BufReader::new(conn);
        let mut line = String::new();
        r.read_line(&mut line).expect("status line");
        let status = line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let mut headers = Vec::new();
        loop {
            line.clear();
            if r.read_line(&mut line).unwrap_or(0) == 0 || line.trim().is_empty() {
                break;
            }
            if let Some((k, v)) = line.split_once(':') {
                headers.push((k.trim().to_string(), v.trim().to_string()));
            }
        }
        let _ = r.read_to_end(&mut Vec::new());
        (status, headers)
    }

    /// Starts it again on the same address with the same data.
    pub fn restart(&mut self) {
        self.stop();
        self.child = spawn(self.dir.path());
        self.wait_listening();
    }

    fn wait_listening(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(&self.host).is_err() {
            assert!(
                Instant::now() < deadline,
                "registry did not listen: {}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stops the registry now (to test a registry that went away).
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `sha256:<hex>` of `bytes`.
pub fn sha256(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    let h = sha2::Sha256::digest(bytes);
    format!(
        "sha256:{}",
        h.iter().map(|b| format!("{b:02x}")).collect::<String>()
    )
}

/// A registry turned hostile, on 127.0.0.1: `/v2/` answers (no credentials asked), and the manifest of
/// `sized:latest` is 1 GiB said in its Content-Length, that of `endless:latest` zeros without end and without
/// a length. What it managed to send is counted.
pub struct HostileRegistry {
    /// Its `host:port`.
    pub host: String,
    /// Bytes of manifest sent so far.
    pub sent: std::sync::Arc<std::sync::atomic::AtomicU64>,
    done: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Drop for HostileRegistry {
    /// Its listener goes: the accepting thread sees `done` at the next connection, this one.
    fn drop(&mut self) {
        self.done.store(true, std::sync::atomic::Ordering::Relaxed);
        let _ = TcpStream::connect(&self.host);
    }
}

impl HostileRegistry {
    /// Starts it on a free port.
    pub fn start() -> HostileRegistry {
        use std::io::{BufRead, BufReader, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let host = listener.local_addr().unwrap().to_string();
        let sent = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let counter = sent.clone();
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stop = done.clone();
        // Each connection's thread ends with its client's hang-up.
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                if stop.load(std::sync::atomic::Ordering::Relaxed) {
                    return;
                }
                let counter = counter.clone();
                std::thread::spawn(move || {
                    let mut reader = BufReader::new(conn.try_clone().unwrap());
                    let mut out = conn;
                    loop {
                        let mut first = String::new();
                        if reader.read_line(&mut first).unwrap_or(0) == 0 {
                            return;
                        }
                        let mut line = String::new();
                        while reader.read_line(&mut line).unwrap_or(0) > 2 {
                            line.clear();
                        }
                        let path = first.split_whitespace().nth(1).unwrap_or_default().to_string();
                        let head = if path == "/v2/" {
                            "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n".to_string()
                        } else if path.starts_with("/v2/sized/") {
                            format!(
                                "HTTP/1.1 200 OK\r\nContent-Type: application/vnd.oci.image.manifest.v1+json\r\n\
                                 Content-Length: {}\r\n\r\n",
                                1u64 << 30
                            )
                        } else if path.starts_with("/v2/endless/") {
                            "HTTP/1.1 200 OK\r\nContent-Type: application/vnd.oci.image.manifest.v1+json\r\n\
                             Connection: close\r\n\r\n"
                                .to_string()
                        } else {
                            "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n".to_string()
                        };
                        if out.write_all(head.as_bytes()).is_err() {
                            return;
                        }
                        if path.starts_with("/v2/sized/") || path.starts_with("/v2/endless/") {
                            let zeros = vec![b' '; 64 << 10];
                            while out.write_all(&zeros).is_ok() {
                                counter.fetch_add(zeros.len() as u64, std::sync::atomic::Ordering::Relaxed);
                            }
                            return;
                        }
                    }
                });
            }
        });
        HostileRegistry { host, sent, done }
    }
}
