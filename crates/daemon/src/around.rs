//! The tower plumbing criusd's call layers share: an [`Around`] reads what it needs of a call's request
//! before the service takes it, then wraps the answer's future. [`AroundLayer`] makes a layer of one, so the
//! deadline ([`crate::deadline`]) and the call counter ([`crate::metrics`]) each hold only their own logic.

use std::pin::Pin;
use std::task::{Context, Poll};

use tonic::codegen::http::{self, Response};

/// An answer's future, boxed.
pub type Answer<R, E> = Pin<Box<dyn Future<Output = Result<Response<R>, E>> + Send>>;

/// What a layer does around each call.
pub trait Around: Clone {
    /// What it keeps of the request.
    type Seen: Send + 'static;

    /// Reads the request, before the wrapped service is called with it.
    fn see<B>(&self, req: &http::Request<B>) -> Self::Seen;

    /// The call's answer, made from the wrapped service's.
    fn wrap<F, R, E>(&self, seen: Self::Seen, answer: F) -> Answer<R, E>
    where
        F: Future<Output = Result<Response<R>, E>> + Send + 'static,
        R: Default + Send + 'static,
        E: Send + 'static;
}

/// The gRPC method a call names: its path (`/runtime.v1.RuntimeService/Version`).
pub fn method<B>(req: &http::Request<B>) -> String {
    req.uri().path().to_string()
}

/// Wraps a server's services in [`Wrapped`] with an [`Around`].
#[derive(Debug, Clone, Copy, Default)]
pub struct AroundLayer<A>(pub A);

impl<S, A: Clone> tower::Layer<S> for AroundLayer<A> {
    type Service = Wrapped<S, A>;

    fn layer(&self, inner: S) -> Wrapped<S, A> {
        Wrapped {
            inner,
            around: self.0.clone(),
        }
    }
}

/// A service whose calls go through an [`Around`].
#[derive(Debug, Clone)]
pub struct Wrapped<S, A> {
    inner: S,
    around: A,
}

impl<S, A, B, R> tower::Service<http::Request<B>> for Wrapped<S, A>
where
    S: tower::Service<http::Request<B>, Response = Response<R>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    A: Around,
    R: Default + Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Answer<R, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let seen = self.around.see(&req);
        let answer = self.inner.call(req);
        self.around.wrap(seen, answer)
    }
}
