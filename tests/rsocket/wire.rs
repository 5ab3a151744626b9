//! A recording proxy: relays a TCP connection frame by frame and logs every frame
//! with its direction, so tests can check what travelled on the wire.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::{BufMut, BytesMut};
use futures::StreamExt as _;
use tokio::io::AsyncWriteExt as _;
use tokio::net::{TcpListener, TcpStream};
use tokio_util::codec::{FramedRead, LengthDelimitedCodec};
use weir::rsocket::frame::{Body, Frame};

/// Which way a frame went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dir {
    /// Client to server.
    Up,
    /// Server to client.
    Down,
}

pub type Log = Arc<Mutex<Vec<(Dir, Frame)>>>;

/// Listen on a free loopback port and relay every connection to `server`; returns
/// the proxy's address and the log.
pub async fn proxy(server: SocketAddr) -> (SocketAddr, Log) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let log: Log = Arc::default();
    let shared = log.clone();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let Ok(upstream) = TcpStream::connect(server).await else {
                continue;
            };
            let (cr, cw) = client.into_split();
            let (sr, sw) = upstream.into_split();
            tokio::spawn(relay(cr, sw, Dir::Up, shared.clone()));
            tokio::spawn(relay(sr, cw, Dir::Down, shared.clone()));
        }
    });
    (addr, log)
}

pub fn codec() -> LengthDelimitedCodec {
    LengthDelimitedCodec::builder()
        .length_field_length(3)
        .max_frame_length((1 << 24) - 1)
        .new_codec()
}

async fn relay(
    read: tokio::net::tcp::OwnedReadHalf,
    mut write: tokio::net::tcp::OwnedWriteHalf,
    dir: Dir,
    log: Log,
) {
    let mut frames = FramedRead::new(read, codec());
    while let Some(Ok(bytes)) = frames.next().await {
        let bytes = bytes.freeze();
        if let Ok(frame) = Frame::decode(bytes.clone()) {
            log.lock().unwrap().push((dir, frame));
        }
        let mut out = BytesMut::with_capacity(bytes.len() + 3);
        out.put_uint(bytes.len() as u64, 3);
        out.extend_from_slice(&bytes);
        if write.write_all(&out).await.is_err() {
            return;
        }
    }
    let _ = write.shutdown().await;
}

/// Checks rule 1.1 on the wire for `stream`, whose items flow `items_dir`: at every
/// point, the PAYLOAD frames with NEXT (a fragmented item counted once) number at
/// most the credit granted so far (`initial_n` of the request plus every REQUEST_N).
/// Returns (items, credit granted, number of grants).
pub fn credit_check(log: &[(Dir, Frame)], stream: u32, items_dir: Dir) -> (u64, u64, usize) {
    let (mut items, mut credit, mut grants) = (0u64, 0u64, 0usize);
    let mut in_fragment = false;
    for (dir, frame) in log.iter().filter(|(_, f)| f.stream == stream) {
        match (&frame.body, *dir == items_dir) {
            (Body::RequestStream { initial_n, .. }, false)
            | (Body::RequestChannel { initial_n, .. }, false) => {
                credit += u64::from(*initial_n);
                grants += 1;
            }
            (Body::RequestN(n), false) => {
                credit += u64::from(*n);
                grants += 1;
            }
            (Body::Payload { next, follows, .. }, true) => {
                if *next && !in_fragment {
                    items += 1;
                    assert!(
                        items <= credit,
                        "stream {stream}: item {items} sent with only {credit} granted"
                    );
                }
                in_fragment = *follows;
            }
            _ => {}
        }
    }
    (items, credit, grants)
}
