//! The client: connects, sends SETUP, and makes requests.

use std::sync::Arc;

use bytes::Bytes;
use tokio::net::{TcpStream, ToSocketAddrs};

use super::conn::{self, Conn};
use super::fragment::Lead;
use super::frame::{Body, Frame, Payload, Setup};
use super::{Config, PayloadStream};
use crate::{Error, Publisher, PublisherExt as _};

/// MIME type announced for metadata and data.
const MIME: &[u8] = b"application/octet-stream";

/// Connect to the RSocket server at `addr` with the default [`Config`]. Must be
/// called inside a tokio runtime (the connection's tasks run there).
pub async fn connect(addr: impl ToSocketAddrs) -> std::io::Result<Client> {
    connect_with(addr, Config::default()).await
}

/// [`connect`] with `config` (its keepalive and lifetime go to the server in SETUP).
pub async fn connect_with(addr: impl ToSocketAddrs, config: Config) -> std::io::Result<Client> {
    let socket = TcpStream::connect(addr).await?;
    let setup = Frame {
        stream: 0,
        body: Body::Setup(Box::new(Setup {
            major: 1,
            minor: 0,
            keepalive_ms: millis(config.keepalive),
            max_lifetime_ms: millis(config.max_lifetime),
            resume_token: None,
            lease: false,
            metadata_mime: Bytes::from_static(MIME),
            data_mime: Bytes::from_static(MIME),
            payload: Payload::default(),
        })),
    };
    let lifetime = config.max_lifetime;
    let halves = conn::split(socket, &config);
    let conn = Conn::start(halves, config, None, true, lifetime, Some(setup));
    Ok(Client {
        inner: Arc::new(ClientOwner { conn }),
    })
}

fn millis(duration: std::time::Duration) -> u32 {
    // Config validated the range.
    u32::try_from(duration.as_millis()).unwrap_or(super::frame::MAX_U31)
}

/// A connection to an RSocket server, for making requests. Cheap to clone; the
/// connection closes once every clone was dropped and its streams ended (or at
/// [`close`](Self::close)).
#[derive(Clone)]
pub struct Client {
    inner: Arc<ClientOwner>,
}

struct ClientOwner {
    conn: Arc<Conn>,
}

impl Drop for ClientOwner {
    fn drop(&mut self) {
        self.conn.close_when_idle();
    }
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client").finish_non_exhaustive()
    }
}

impl Client {
    /// A request-response: the publisher emits the response (or completes empty, or
    /// fails). The request is sent at the subscriber's first `request`; on a
    /// connection that is already over or closing, the publisher fails at
    /// `subscribe`, and one that ends before the first `request` fails it then.
    pub fn request_response(&self, request: Payload) -> PayloadStream {
        PayloadStream::response(self.inner.conn.clone(), request)
    }

    /// A request-stream: the publisher emits the server's items; its subscriber's
    /// demand becomes the stream's credit (see [`PayloadStream`]).
    pub fn request_stream(&self, request: Payload) -> PayloadStream {
        PayloadStream::stream(self.inner.conn.clone(), request)
    }

    /// A request-channel: `outgoing`'s items go to the server (its first item with
    /// the request, the others as the server grants credit), and the publisher
    /// returned emits the server's items. The channel opens at the returned
    /// publisher's first `request` and once `outgoing` produced its first item (or
    /// ended).
    ///
    /// Until the channel is open on the wire, it ends here alone: cancelling the
    /// returned publisher cancels `outgoing`, and a failing `outgoing` fails the
    /// returned publisher, with nothing sent. Once it is open, cancelling sends CANCEL
    /// and ends only the server-to-client direction (`outgoing` goes on until it
    /// ends), as the protocol says; a failing `outgoing` sends ERROR, which ends both
    /// directions: the returned publisher fails with `outgoing`'s error.
    pub fn request_channel(
        &self,
        outgoing: impl Publisher<Item = Payload> + Send + 'static,
    ) -> PayloadStream {
        PayloadStream::channel(self.inner.conn.clone(), outgoing.boxed())
    }

    /// A fire-and-forget request, queued for sending. Fails when the connection is
    /// over or closing.
    pub fn fire_and_forget(&self, request: Payload) -> Result<(), Error> {
        self.inner
            .conn
            .open(None, None, Lead::Fnf, request)
            .map(|_| ())
    }

    /// A METADATA_PUSH, queued for sending.
    pub fn metadata_push(&self, metadata: Bytes) -> Result<(), Error> {
        if let Some(error) = self.inner.conn.over() {
            return Err(error);
        }
        self.inner.conn.control(0, Body::MetadataPush(metadata));
        Ok(())
    }

    /// Streams open on the connection now.
    pub fn open_streams(&self) -> usize {
        self.inner.conn.open_streams()
    }

    /// How the connection ended, once it did.
    pub fn closed_with(&self) -> Option<Error> {
        self.inner.conn.over()
    }

    /// Refuse new requests, and close the connection once its open streams ended;
    /// resolves when it is closed.
    pub async fn close(&self) {
        self.inner.conn.close_when_idle();
        self.inner.conn.closed().await;
    }
}
