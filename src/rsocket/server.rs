//! The server: accepts connections, answers each one's SETUP, and serves requests with
//! a [`Handler`].

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt as _;
use tokio::net::{TcpListener, ToSocketAddrs};
use tokio::task::JoinHandle;

use super::conn::{self, error_body, Conn};
use super::frame::{Body, ErrorCode, Frame, Payload};
use super::{Config, PayloadStream, RemoteError};
use crate::{BoxPublisher, Error, PublisherExt as _};

/// How long a new connection may take to send its SETUP frame.
const SETUP_TIMEOUT: Duration = Duration::from_secs(30);

/// What a server does with requests. Every method has a default that refuses the
/// request (`REJECTED`; fire-and-forget and metadata push are ignored), so a handler
/// implements only the interactions it serves.
///
/// The methods run on the connection's reader task: return quickly (build a
/// publisher; do the work when it is subscribed and requested). A method that panics
/// fails its stream with `APPLICATION_ERROR`; the connection lives on. A publisher
/// that fails sends an ERROR frame: with the code of a
/// [`RemoteError`] source, `APPLICATION_ERROR` otherwise.
pub trait Handler: Send + Sync + 'static {
    /// Answer a request-response with a publisher whose first item is the response
    /// (only one item is requested; completing without one answers with an empty
    /// completion).
    fn request_response(&self, request: Payload) -> BoxPublisher<Payload> {
        let _ = request;
        rejected("request-response")
    }

    /// A fire-and-forget request.
    fn fire_and_forget(&self, request: Payload) {
        let _ = request;
    }

    /// Answer a request-stream: the publisher sees only the peer's `REQUEST_N` as
    /// demand.
    fn request_stream(&self, request: Payload) -> BoxPublisher<Payload> {
        let _ = request;
        rejected("request-stream")
    }

    /// Answer a request-channel: `first` is the request's payload, `incoming` the
    /// peer's items (`first` included, as its first item). Subscribe to `incoming`
    /// to consume them (its `request(n)` is the peer's credit); dropping it
    /// unsubscribed cancels them.
    fn request_channel(&self, first: &Payload, incoming: PayloadStream) -> BoxPublisher<Payload> {
        let _ = (first, incoming);
        rejected("request-channel")
    }

    /// A METADATA_PUSH.
    fn metadata_push(&self, metadata: Bytes) {
        let _ = metadata;
    }
}

fn rejected(what: &str) -> BoxPublisher<Payload> {
    crate::error(
        RemoteError::new(
            ErrorCode::REJECTED,
            format!("this server does not serve {what}"),
        )
        .into_error(),
    )
    .boxed()
}

impl<H: Handler> Handler for Arc<H> {
    fn request_response(&self, request: Payload) -> BoxPublisher<Payload> {
        (**self).request_response(request)
    }
    fn fire_and_forget(&self, request: Payload) {
        (**self).fire_and_forget(request)
    }
    fn request_stream(&self, request: Payload) -> BoxPublisher<Payload> {
        (**self).request_stream(request)
    }
    fn request_channel(&self, first: &Payload, incoming: PayloadStream) -> BoxPublisher<Payload> {
        (**self).request_channel(first, incoming)
    }
    fn metadata_push(&self, metadata: Bytes) {
        (**self).metadata_push(metadata)
    }
}

/// An RSocket server on a TCP listener. Dropping it (or [`shutdown`](Self::shutdown))
/// stops accepting connections and closes the open ones.
pub struct Server {
    addr: SocketAddr,
    accept: JoinHandle<()>,
    /// The connections past their handshake; `None` once the server is dropped, so
    /// that a connection finishing its handshake after that is closed, not served.
    conns: Registry,
}

/// [`Server::conns`]: shared with the tasks that run handshakes.
type Registry = Arc<Mutex<Option<Vec<Weak<Conn>>>>>;

/// Close `conn` because the server shut down (an ERROR frame, then the socket).
fn shut_down(conn: &Conn) {
    conn.close(
        Error::msg("rsocket: the server shut down"),
        Some(Frame {
            stream: 0,
            body: error_body(ErrorCode::CONNECTION_CLOSE, "the server shut down"),
        }),
    );
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl Server {
    /// Listen on `addr` with the default [`Config`], serving with `handler`. Must be
    /// called inside a tokio runtime (the server's tasks run there).
    pub async fn bind(addr: impl ToSocketAddrs, handler: impl Handler) -> std::io::Result<Server> {
        Self::bind_with(addr, handler, Config::default()).await
    }

    /// [`bind`](Self::bind) with `config`.
    pub async fn bind_with(
        addr: impl ToSocketAddrs,
        handler: impl Handler,
        config: Config,
    ) -> std::io::Result<Server> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let handler: Arc<dyn Handler> = Arc::new(handler);
        let conns: Registry = Arc::new(Mutex::new(Some(Vec::new())));
        let registry = conns.clone();
        let accept = tokio::spawn(async move {
            loop {
                let socket = match listener.accept().await {
                    Ok((socket, _)) => socket,
                    Err(error) => {
                        // Out of descriptors and the like: wait, then accept again.
                        tracing::warn!("rsocket server: accept failed: {error}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let (handler, config, registry) =
                    (handler.clone(), config.clone(), registry.clone());
                tokio::spawn(async move {
                    if let Some(conn) = handshake(socket, handler, config).await {
                        let served = {
                            let mut conns = registry.lock().unwrap_or_else(|p| p.into_inner());
                            conns.as_mut().map(|conns| {
                                conns.retain(|c| c.strong_count() > 0);
                                conns.push(Arc::downgrade(&conn));
                            })
                        };
                        // The server was dropped during the handshake: the
                        // connection ends as the others did.
                        if served.is_none() {
                            shut_down(&conn);
                        }
                    }
                });
            }
        });
        Ok(Server {
            addr,
            accept,
            conns,
        })
    }

    /// The address the server listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Connections open now.
    pub fn connections(&self) -> usize {
        let conns = self.conns.lock().unwrap_or_else(|p| p.into_inner());
        conns
            .iter()
            .flatten()
            .filter_map(Weak::upgrade)
            .filter(|c| c.over().is_none())
            .count()
    }

    /// Stop accepting and close every connection (their streams end with an error).
    pub fn shutdown(self) {
        drop(self);
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.accept.abort();
        let conns = self
            .conns
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
            .unwrap_or_default();
        for conn in conns.iter().filter_map(Weak::upgrade) {
            shut_down(&conn);
        }
    }
}

/// Read the SETUP frame and start the connection; `None` (the socket closed, with an
/// ERROR frame when the setup was refused) otherwise.
async fn handshake(
    socket: tokio::net::TcpStream,
    handler: Arc<dyn Handler>,
    config: Config,
) -> Option<Arc<Conn>> {
    let (mut read, mut write) = conn::split(socket, &config);
    let first = match tokio::time::timeout(SETUP_TIMEOUT, read.next()).await {
        Ok(Some(Ok(bytes))) => Frame::decode(bytes.freeze()),
        _ => return None,
    };
    let refusal = match first {
        Ok(Frame {
            body: Body::Setup(setup),
            ..
        }) => {
            if setup.major != 1 {
                Some((
                    ErrorCode::UNSUPPORTED_SETUP,
                    format!(
                        "protocol version {}.{} (this server speaks 1.x)",
                        setup.major, setup.minor
                    ),
                ))
            } else if setup.resume_token.is_some() {
                Some((
                    ErrorCode::UNSUPPORTED_SETUP,
                    "resumption is not supported".to_owned(),
                ))
            } else if setup.lease {
                Some((
                    ErrorCode::UNSUPPORTED_SETUP,
                    "leases are not supported".to_owned(),
                ))
            } else {
                let lifetime = Duration::from_millis(u64::from(setup.max_lifetime_ms.max(1)));
                return Some(Conn::start(
                    (read, write),
                    config,
                    Some(handler),
                    false,
                    lifetime,
                    None,
                ));
            }
        }
        Ok(_) => Some((
            ErrorCode::INVALID_SETUP,
            "the first frame must be SETUP".to_owned(),
        )),
        Err(error) => Some((
            ErrorCode::INVALID_SETUP,
            format!("malformed SETUP: {error}"),
        )),
    };
    if let Some((code, message)) = refusal {
        let mut buf = bytes::BytesMut::new();
        let frame = Frame {
            stream: 0,
            body: error_body(code, &message),
        };
        if conn::put_frame(&mut buf, &frame).is_ok() {
            use tokio::io::AsyncWriteExt as _;
            let _ = write.write_all(&buf).await;
            let _ = write.shutdown().await;
        }
    }
    None
}
