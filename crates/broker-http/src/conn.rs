//! Connection limits: at most `max_connections` connections served at once, and a read timeout.
//!
//! [`Capped`] is an `axum-server` acceptor that takes a permit from a semaphore for each accepted
//! TCP connection and holds it for the connection's life (the permit travels inside the stream,
//! [`Permitted`]); a connection accepted while no permit is left is closed at once, unanswered,
//! so an excess costs a file descriptor for an instant rather than a task and buffers for as long
//! as its client likes. It sits under TLS, so the cap also bounds handshakes in progress.
//!
//! The read timeout bounds each phase a client controls: the TLS handshake, a request's head
//! (also the idle wait for the next request on a kept-alive connection: hyper's header read
//! timeout, which needs a timer) and, in [`crate::extract::Raw::read`], a request's whole body
//! (answered 408 with `Connection: close`). These are wall-clock I/O timeouts, not domain time.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum_server::accept::Accept;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The default cap on connections served at once.
pub const DEFAULT_MAX_CONNECTIONS: usize = 4096;

/// The default read timeout (handshake, request head, request body).
pub const DEFAULT_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// An acceptor admitting at most as many connections at once as its semaphore has permits.
#[derive(Debug, Clone)]
pub struct Capped<A> {
    inner: A,
    permits: Arc<Semaphore>,
}

impl<A> Capped<A> {
    /// Caps `inner` at `max` connections at once (at least one).
    pub fn new(inner: A, max: usize) -> Self {
        Self {
            inner,
            permits: Arc::new(Semaphore::new(max.clamp(1, Semaphore::MAX_PERMITS))),
        }
    }
}

impl<A, I, S> Accept<I, S> for Capped<A>
where
    A: Accept<I, S>,
    A::Future: Send + 'static,
    A::Stream: Send + 'static,
    A::Service: Send + 'static,
{
    type Stream = Permitted<A::Stream>;
    type Service = A::Service;
    type Future = Pin<Box<dyn Future<Output = io::Result<(Self::Stream, Self::Service)>> + Send>>;

    fn accept(&self, stream: I, service: S) -> Self::Future {
        let Ok(permit) = self.permits.clone().try_acquire_owned() else {
            // Dropping the stream closes the connection.
            drop(stream);
            metrics::counter!("countersign_http_connections_refused_total").increment(1);
            return Box::pin(std::future::ready(Err(io::Error::other(
                "connection limit reached",
            ))));
        };
        let inner = self.inner.accept(stream, service);
        Box::pin(async move {
            let (stream, service) = inner.await?;
            Ok((
                Permitted {
                    inner: stream,
                    _permit: permit,
                },
                service,
            ))
        })
    }
}

/// A connection's stream holding its permit: dropped with the connection, freeing the slot.
#[derive(Debug)]
pub struct Permitted<S> {
    inner: S,
    _permit: OwnedSemaphorePermit,
}

impl<S: AsyncRead + Unpin> AsyncRead for Permitted<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Permitted<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// Applies the read timeout to request heads (and the idle wait between kept-alive requests).
pub fn configure_http(
    builder: &mut hyper_util::server::conn::auto::Builder<hyper_util::rt::TokioExecutor>,
    read_timeout: Duration,
) {
    builder
        .http1()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(read_timeout);
}
