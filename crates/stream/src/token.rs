//! Single-use tokens: Exec, Attach and PortForward each put their request here and answer with a URL that
//! names its token; the first connection to that URL takes the request, and a token not used within its
//! lifetime (1 minute, as kubelet's streaming server) is gone.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::{Error, Request, Result};

/// How long a token waits for its connection.
pub const LIFETIME: Duration = Duration::from_secs(60);

/// Most tokens waiting at once; more is refused rather than grown without bound.
pub const MAX_PENDING: usize = 4096;

/// The waiting requests, by token.
#[derive(Debug)]
pub struct Tokens {
    lifetime: Duration,
    pending: Mutex<HashMap<String, (Instant, Request)>>,
}

impl Default for Tokens {
    fn default() -> Tokens {
        Tokens::with_lifetime(LIFETIME)
    }
}

impl Tokens {
    /// Tokens that live `lifetime`.
    pub fn with_lifetime(lifetime: Duration) -> Tokens {
        Tokens {
            lifetime,
            pending: Mutex::new(HashMap::new()),
        }
    }

    /// Keeps `req` and returns its new token (URL-safe).
    pub fn insert(&self, req: Request) -> Result<String> {
        let token =
            crius_common::id::random_hex(16).map_err(Error::io("reading /dev/urandom for a token"))?;
        let now = Instant::now();
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        pending.retain(|_, (at, _)| now.duration_since(*at) < self.lifetime);
        if pending.len() >= MAX_PENDING {
            return Err(Error::TooManyPending);
        }
        pending.insert(token.clone(), (now, req));
        Ok(token)
    }

    /// Takes the request of `token`: None if it was never given, was used already, or expired.
    pub fn take(&self, token: &str) -> Option<Request> {
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        let (at, req) = pending.remove(token)?;
        (at.elapsed() < self.lifetime).then_some(req)
    }

    /// How many tokens wait (expired ones included until the next insert).
    pub fn len(&self) -> usize {
        self.pending.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Whether none waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{PortForwardRequest, Request};

    fn req() -> Request {
        Request::PortForward(PortForwardRequest {
            sandbox_id: "p".into(),
            ports: vec![80],
        })
    }

    #[test]
    fn a_token_is_used_once() {
        let t = Tokens::default();
        let a = t.insert(req()).unwrap();
        let b = t.insert(req()).unwrap();
        assert_ne!(a, b);
        assert_eq!(a.len(), 32);
        assert!(t.take(&a).is_some());
        assert!(t.take(&a).is_none(), "second use");
        assert!(t.take("nope").is_none());
        assert!(t.take(&b).is_some());
        assert!(t.is_empty());
    }

    #[test]
    fn an_expired_token_is_refused_and_forgotten() {
        let t = Tokens::with_lifetime(Duration::from_millis(20));
        let a = t.insert(req()).unwrap();
        std::thread::sleep(Duration::from_millis(30));
        assert!(t.take(&a).is_none());
        let _ = t.insert(req()).unwrap();
        assert_eq!(t.len(), 1, "expired ones are dropped on insert");
    }
}
