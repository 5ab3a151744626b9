//! RSocket 1.0 frames: [`Frame`] and its [`encode`](Frame::encode) /
//! [`decode`](Frame::decode).
//!
//! # Layout
//!
//! Every frame starts with a six-byte header: a 31-bit stream id (its top bit is
//! reserved and must be 0; stream 0 is the connection itself), then 16 bits holding
//! the frame type (6 bits) and ten flag bits. Two flags exist on every frame: *ignore*
//! (a receiver that does not understand the frame may drop it) and *metadata* (the
//! payload carries metadata). The others depend on the type: *follows* (more
//! fragments follow), *complete*, *next*, and on SETUP *resume* and *lease*; on
//! KEEPALIVE *respond*. All integers are big-endian.
//!
//! A payload (request and PAYLOAD frames) is optional metadata, preceded by its
//! 24-bit length, then data up to the end of the frame. The frame's length comes from
//! the transport (the 24-bit prefix on TCP), so `decode` takes exactly one frame.
//!
//! # Decoding
//!
//! [`Frame::decode`] takes the frame's bytes as [`Bytes`] and slices payloads out of
//! them (no copy, no allocation). Every length it reads is checked against what is
//! left of the frame before it is used, every value the protocol constrains (request
//! counts above 0, stream 0 for connection frames and above 0 for stream frames, a
//! PAYLOAD that signals next or complete) is checked, and a violation is a
//! [`FrameError`] naming the field. A frame type this module does not know is an
//! error unless its ignore flag is set; then it decodes to [`Body::Ignored`], as the
//! protocol asks.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use std::fmt;

/// The largest frame the 24-bit length prefix of TCP can describe: 2^24 − 1 bytes,
/// the protocol's limit for every transport.
pub const MAX_FRAME_LEN: usize = (1 << 24) - 1;

/// The largest value of the protocol's 31-bit fields (stream ids, request counts,
/// durations in milliseconds). A `REQUEST_N` of this value means "unbounded".
pub const MAX_U31: u32 = (1 << 31) - 1;

/// The header's length: stream id (4 bytes), type and flags (2 bytes).
pub const HEADER_LEN: usize = 6;

/// The largest metadata a frame can carry with its 24-bit length field.
const MAX_METADATA_LEN: usize = (1 << 24) - 1;

/// Flag bits (of the 10 below the 6-bit frame type).
mod flag {
    pub(super) const IGNORE: u16 = 0x200;
    pub(super) const METADATA: u16 = 0x100;
    /// FOLLOWS on request and PAYLOAD frames, RESUME on SETUP, RESPOND on KEEPALIVE.
    pub(super) const FOLLOWS: u16 = 0x80;
    pub(super) const RESUME: u16 = 0x80;
    pub(super) const RESPOND: u16 = 0x80;
    /// COMPLETE on PAYLOAD and REQUEST_CHANNEL, LEASE on SETUP.
    pub(super) const COMPLETE: u16 = 0x40;
    pub(super) const LEASE: u16 = 0x40;
    pub(super) const NEXT: u16 = 0x20;
}

/// Frame type codes.
mod kind {
    pub(super) const SETUP: u8 = 0x01;
    pub(super) const LEASE: u8 = 0x02;
    pub(super) const KEEPALIVE: u8 = 0x03;
    pub(super) const REQUEST_RESPONSE: u8 = 0x04;
    pub(super) const REQUEST_FNF: u8 = 0x05;
    pub(super) const REQUEST_STREAM: u8 = 0x06;
    pub(super) const REQUEST_CHANNEL: u8 = 0x07;
    pub(super) const REQUEST_N: u8 = 0x08;
    pub(super) const CANCEL: u8 = 0x09;
    pub(super) const PAYLOAD: u8 = 0x0A;
    pub(super) const ERROR: u8 = 0x0B;
    pub(super) const METADATA_PUSH: u8 = 0x0C;
}

/// An RSocket frame: the stream it belongs to (0: the connection) and what it says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    /// The stream id (31 bits; 0 for frames about the connection).
    pub stream: u32,
    /// The frame's type and contents.
    pub body: Body,
}

/// Metadata (optional) and data: what a request or an item carries.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Payload {
    /// Metadata, when the frame's metadata flag is set (it may be empty).
    pub metadata: Option<Bytes>,
    /// The data.
    pub data: Bytes,
}

impl Payload {
    /// A payload of `data` without metadata.
    pub fn data(data: impl Into<Bytes>) -> Self {
        Payload {
            metadata: None,
            data: data.into(),
        }
    }
}

/// The SETUP frame's contents (the client's first frame).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Setup {
    /// Protocol version, major.
    pub major: u16,
    /// Protocol version, minor.
    pub minor: u16,
    /// Milliseconds between the client's KEEPALIVE frames (1..=2^31 − 1).
    pub keepalive_ms: u32,
    /// Milliseconds without a KEEPALIVE after which the peer is dead (1..=2^31 − 1).
    pub max_lifetime_ms: u32,
    /// The resume token, when the client asks for resumption (flag R).
    pub resume_token: Option<Bytes>,
    /// The client will honour LEASE frames (flag L).
    pub lease: bool,
    /// MIME type of metadata (at most 255 bytes).
    pub metadata_mime: Bytes,
    /// MIME type of data (at most 255 bytes).
    pub data_mime: Bytes,
    /// The setup payload.
    pub payload: Payload,
}

/// What a frame says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Body {
    /// SETUP (stream 0). Boxed: it is large and rare, and every frame moved through
    /// the reader would otherwise carry its size.
    Setup(Box<Setup>),
    /// LEASE (stream 0): the requester may send `requests` requests in the next
    /// `ttl_ms` milliseconds.
    Lease {
        /// Validity in milliseconds (31 bits).
        ttl_ms: u32,
        /// Requests allowed (31 bits).
        requests: u32,
        /// Metadata (no length prefix: it fills the frame).
        metadata: Option<Bytes>,
    },
    /// KEEPALIVE (stream 0).
    Keepalive {
        /// The receiver must answer with a KEEPALIVE echoing `data`.
        respond: bool,
        /// Resume position (63 bits; 0 when resumption is not used).
        last_position: u64,
        /// Data to echo.
        data: Bytes,
    },
    /// REQUEST_RESPONSE: one item back.
    RequestResponse {
        /// More fragments follow.
        follows: bool,
        /// The request.
        payload: Payload,
    },
    /// REQUEST_FNF: no answer.
    RequestFnf {
        /// More fragments follow.
        follows: bool,
        /// The request.
        payload: Payload,
    },
    /// REQUEST_STREAM: a stream back, `initial_n` items granted.
    RequestStream {
        /// More fragments follow.
        follows: bool,
        /// Credit granted with the request (1..=2^31 − 1).
        initial_n: u32,
        /// The request.
        payload: Payload,
    },
    /// REQUEST_CHANNEL: streams both ways.
    RequestChannel {
        /// More fragments follow.
        follows: bool,
        /// The requester's stream is complete with this frame.
        complete: bool,
        /// Credit granted with the request (1..=2^31 − 1).
        initial_n: u32,
        /// The request (the first item of the requester's stream).
        payload: Payload,
    },
    /// REQUEST_N: `n` more items granted (1..=2^31 − 1; 2^31 − 1 means unbounded).
    RequestN(u32),
    /// CANCEL.
    Cancel,
    /// PAYLOAD: an item (`next`), the end (`complete`), or both.
    Payload {
        /// More fragments follow.
        follows: bool,
        /// The stream completes with this frame.
        complete: bool,
        /// The frame carries an item.
        next: bool,
        /// The item (empty when only `complete`).
        payload: Payload,
    },
    /// ERROR: on a stream (> 0) or the connection (0).
    Error {
        /// The error code.
        code: ErrorCode,
        /// The message (UTF-8 by convention; not checked).
        data: Bytes,
    },
    /// METADATA_PUSH (stream 0).
    MetadataPush(Bytes),
    /// A frame of a type this module does not handle (RESUME, RESUME_OK, EXT or an
    /// unknown type) whose ignore flag was set: the receiver drops it.
    Ignored {
        /// Its type code.
        frame_type: u8,
    },
}

/// An ERROR frame's code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ErrorCode(pub u32);

impl ErrorCode {
    /// The SETUP frame is invalid (stream 0).
    pub const INVALID_SETUP: ErrorCode = ErrorCode(0x001);
    /// Some SETUP parameters are unsupported (stream 0).
    pub const UNSUPPORTED_SETUP: ErrorCode = ErrorCode(0x002);
    /// The server rejected the SETUP (stream 0).
    pub const REJECTED_SETUP: ErrorCode = ErrorCode(0x003);
    /// The server rejected a RESUME (stream 0).
    pub const REJECTED_RESUME: ErrorCode = ErrorCode(0x004);
    /// The connection is being terminated at once (stream 0).
    pub const CONNECTION_ERROR: ErrorCode = ErrorCode(0x101);
    /// The connection is being closed after its streams end (stream 0).
    pub const CONNECTION_CLOSE: ErrorCode = ErrorCode(0x102);
    /// The application failed the stream (`on_error`).
    pub const APPLICATION_ERROR: ErrorCode = ErrorCode(0x201);
    /// The responder refused the request without processing it.
    pub const REJECTED: ErrorCode = ErrorCode(0x202);
    /// The responder cancelled the request.
    pub const CANCELED: ErrorCode = ErrorCode(0x203);
    /// The request is invalid.
    pub const INVALID: ErrorCode = ErrorCode(0x204);

    /// True for the codes that concern the connection (sent on stream 0).
    pub fn is_connection_error(self) -> bool {
        matches!(self.0, 0x001..=0x004 | 0x101 | 0x102)
    }
}

/// Why bytes are not a valid frame.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FrameError {
    /// The frame ends before a field it must contain.
    Truncated {
        /// The frame type (`None` when even the header is cut).
        frame_type: Option<u8>,
        /// The field that does not fit.
        field: &'static str,
        /// Bytes the field needs.
        needed: usize,
        /// Bytes left.
        left: usize,
    },
    /// Longer than [`MAX_FRAME_LEN`].
    TooLong(usize),
    /// A reserved bit (the top bit of a 31-bit field) is set.
    ReservedBit(&'static str),
    /// A frame type that this module does not handle, without the ignore flag.
    UnknownType(u8),
    /// A connection frame on a stream, or a stream frame on stream 0.
    WrongStream {
        /// The frame type.
        frame_type: u8,
        /// The stream id it came on.
        stream: u32,
    },
    /// A field the protocol requires to be above 0 is 0.
    Zero(&'static str),
    /// A PAYLOAD frame with neither next nor complete set.
    EmptyPayload,
    /// A frame whose type has a fixed length carries bytes after it.
    TrailingBytes {
        /// The frame type.
        frame_type: u8,
        /// Extra bytes.
        extra: usize,
    },
    /// A value too large for its field, refused by [`Frame::encode`].
    TooLarge {
        /// The field.
        field: &'static str,
        /// Its length or value.
        value: usize,
    },
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrameError::Truncated {
                frame_type: Some(t),
                field,
                needed,
                left,
            } => write!(
                f,
                "truncated frame of type {t:#04x}: {field} needs {needed} bytes, {left} left"
            ),
            FrameError::Truncated {
                frame_type: None,
                field,
                needed,
                left,
            } => write!(
                f,
                "truncated frame: {field} needs {needed} bytes, {left} left"
            ),
            FrameError::TooLong(len) => write!(
                f,
                "frame of {len} bytes: the protocol's limit is {MAX_FRAME_LEN}"
            ),
            FrameError::ReservedBit(field) => {
                write!(f, "the reserved top bit of {field} is set")
            }
            FrameError::UnknownType(t) => {
                write!(f, "frame type {t:#04x} is not supported and not ignorable")
            }
            FrameError::WrongStream { frame_type, stream } => write!(
                f,
                "frame type {frame_type:#04x} on stream {stream}: {}",
                if *stream == 0 {
                    "it belongs to a stream, not the connection"
                } else {
                    "it belongs to the connection (stream 0)"
                }
            ),
            FrameError::Zero(field) => write!(f, "{field} is 0; the protocol requires > 0"),
            FrameError::EmptyPayload => {
                write!(
                    f,
                    "PAYLOAD frame with neither the next nor the complete flag"
                )
            }
            FrameError::TrailingBytes { frame_type, extra } => write!(
                f,
                "frame type {frame_type:#04x} has {extra} bytes after its last field"
            ),
            FrameError::TooLarge { field, value } => {
                write!(f, "{field} of {value} does not fit its field")
            }
        }
    }
}

impl std::error::Error for FrameError {}

/// Reads fields off a frame, checking each length first.
struct FieldReader {
    bytes: Bytes,
    frame_type: Option<u8>,
}

impl FieldReader {
    fn need(&self, field: &'static str, needed: usize) -> Result<(), FrameError> {
        if self.bytes.len() < needed {
            return Err(FrameError::Truncated {
                frame_type: self.frame_type,
                field,
                needed,
                left: self.bytes.len(),
            });
        }
        Ok(())
    }

    fn u8(&mut self, field: &'static str) -> Result<u8, FrameError> {
        self.need(field, 1)?;
        Ok(self.bytes.get_u8())
    }

    fn u16(&mut self, field: &'static str) -> Result<u16, FrameError> {
        self.need(field, 2)?;
        Ok(self.bytes.get_u16())
    }

    fn u24(&mut self, field: &'static str) -> Result<usize, FrameError> {
        self.need(field, 3)?;
        let b = self.bytes.split_to(3);
        Ok(usize::from(b[0]) << 16 | usize::from(b[1]) << 8 | usize::from(b[2]))
    }

    /// A 31-bit field (top bit reserved).
    fn u31(&mut self, field: &'static str) -> Result<u32, FrameError> {
        self.need(field, 4)?;
        let v = self.bytes.get_u32();
        if v > MAX_U31 {
            return Err(FrameError::ReservedBit(field));
        }
        Ok(v)
    }

    /// A 31-bit field that must be above 0.
    fn positive(&mut self, field: &'static str) -> Result<u32, FrameError> {
        match self.u31(field)? {
            0 => Err(FrameError::Zero(field)),
            v => Ok(v),
        }
    }

    fn u32(&mut self, field: &'static str) -> Result<u32, FrameError> {
        self.need(field, 4)?;
        Ok(self.bytes.get_u32())
    }

    fn u63(&mut self, field: &'static str) -> Result<u64, FrameError> {
        self.need(field, 8)?;
        let v = self.bytes.get_u64();
        if v > u64::MAX >> 1 {
            return Err(FrameError::ReservedBit(field));
        }
        Ok(v)
    }

    fn take(&mut self, field: &'static str, len: usize) -> Result<Bytes, FrameError> {
        self.need(field, len)?;
        Ok(self.bytes.split_to(len))
    }

    fn rest(&mut self) -> Bytes {
        std::mem::take(&mut self.bytes)
    }

    /// Metadata (24-bit length, when `flags` has METADATA) and data to the end.
    fn payload(&mut self, flags: u16) -> Result<Payload, FrameError> {
        let metadata = if flags & flag::METADATA != 0 {
            let len = self.u24("metadata length")?;
            Some(self.take("metadata", len)?)
        } else {
            None
        };
        Ok(Payload {
            metadata,
            data: self.rest(),
        })
    }

    /// The frame must end here.
    fn end(&self, frame_type: u8) -> Result<(), FrameError> {
        match self.bytes.len() {
            0 => Ok(()),
            extra => Err(FrameError::TrailingBytes { frame_type, extra }),
        }
    }
}

/// A PAYLOAD frame with NEXT, without metadata and without FOLLOWS (an item carried
/// whole, the reader's common case): its stream and whether it completes. Looks at
/// the header of `frame` (one frame, without the transport's length prefix) only;
/// `None` for any other frame, which [`Frame::decode`] then reads. When this says
/// `Some((stream, complete))`, `Frame::decode` of the same bytes gives
/// `Body::Payload { follows: false, complete, next: true, .. }` on `stream`, with no
/// metadata and the data `frame[HEADER_LEN..]`.
pub(crate) fn plain_next(frame: &[u8]) -> Option<(u32, bool)> {
    let header: &[u8; HEADER_LEN] = frame.get(..HEADER_LEN)?.try_into().ok()?;
    let stream = u32::from_be_bytes([header[0], header[1], header[2], header[3]]);
    let type_and_flags = u16::from_be_bytes([header[4], header[5]]);
    let flags = type_and_flags & 0x3FF;
    let plain = (type_and_flags >> 10) as u8 == kind::PAYLOAD
        && stream != 0
        && stream <= MAX_U31
        && flags & (flag::METADATA | flag::FOLLOWS | flag::NEXT) == flag::NEXT;
    plain.then_some((stream, flags & flag::COMPLETE != 0))
}

impl Frame {
    /// Decode one frame (without the transport's length prefix).
    ///
    /// # Errors
    ///
    /// A [`FrameError`] naming what is wrong; see the module docs.
    pub fn decode(bytes: Bytes) -> Result<Frame, FrameError> {
        if bytes.len() > MAX_FRAME_LEN {
            return Err(FrameError::TooLong(bytes.len()));
        }
        let mut r = FieldReader {
            bytes,
            frame_type: None,
        };
        let stream = r.u31("stream id")?;
        let type_and_flags = r.u16("frame type and flags")?;
        let frame_type = (type_and_flags >> 10) as u8;
        let flags = type_and_flags & 0x3FF;
        r.frame_type = Some(frame_type);
        check_stream(frame_type, stream)?;
        let follows = flags & flag::FOLLOWS != 0;
        let body = match frame_type {
            kind::SETUP => {
                let major = r.u16("major version")?;
                let minor = r.u16("minor version")?;
                let keepalive_ms = r.positive("time between keepalives")?;
                let max_lifetime_ms = r.positive("max lifetime")?;
                let resume_token = if flags & flag::RESUME != 0 {
                    let len = usize::from(r.u16("resume token length")?);
                    Some(r.take("resume token", len)?)
                } else {
                    None
                };
                let len = usize::from(r.u8("metadata MIME length")?);
                let metadata_mime = r.take("metadata MIME type", len)?;
                let len = usize::from(r.u8("data MIME length")?);
                let data_mime = r.take("data MIME type", len)?;
                Body::Setup(Box::new(Setup {
                    major,
                    minor,
                    keepalive_ms,
                    max_lifetime_ms,
                    resume_token,
                    lease: flags & flag::LEASE != 0,
                    metadata_mime,
                    data_mime,
                    payload: r.payload(flags)?,
                }))
            }
            kind::LEASE => {
                let ttl_ms = r.u31("lease time-to-live")?;
                let requests = r.u31("lease number of requests")?;
                let metadata = (flags & flag::METADATA != 0).then(|| r.rest());
                r.end(frame_type)?;
                Body::Lease {
                    ttl_ms,
                    requests,
                    metadata,
                }
            }
            kind::KEEPALIVE => Body::Keepalive {
                respond: flags & flag::RESPOND != 0,
                last_position: r.u63("last received position")?,
                data: r.rest(),
            },
            kind::REQUEST_RESPONSE => Body::RequestResponse {
                follows,
                payload: r.payload(flags)?,
            },
            kind::REQUEST_FNF => Body::RequestFnf {
                follows,
                payload: r.payload(flags)?,
            },
            kind::REQUEST_STREAM => Body::RequestStream {
                follows,
                initial_n: r.positive("initial request n")?,
                payload: r.payload(flags)?,
            },
            kind::REQUEST_CHANNEL => Body::RequestChannel {
                follows,
                complete: flags & flag::COMPLETE != 0,
                initial_n: r.positive("initial request n")?,
                payload: r.payload(flags)?,
            },
            kind::REQUEST_N => {
                let n = r.positive("request n")?;
                r.end(frame_type)?;
                Body::RequestN(n)
            }
            kind::CANCEL => {
                r.end(frame_type)?;
                Body::Cancel
            }
            kind::PAYLOAD => {
                let complete = flags & flag::COMPLETE != 0;
                let next = flags & flag::NEXT != 0;
                if !complete && !next {
                    return Err(FrameError::EmptyPayload);
                }
                Body::Payload {
                    follows,
                    complete,
                    next,
                    payload: r.payload(flags)?,
                }
            }
            kind::ERROR => Body::Error {
                code: ErrorCode(r.u32("error code")?),
                data: r.rest(),
            },
            kind::METADATA_PUSH => Body::MetadataPush(r.rest()),
            other if flags & flag::IGNORE != 0 => Body::Ignored { frame_type: other },
            other => return Err(FrameError::UnknownType(other)),
        };
        Ok(Frame { stream, body })
    }

    /// The encoded length of this frame (without the transport's length prefix).
    pub fn encoded_len(&self) -> usize {
        let payload = |p: &Payload| p.metadata.as_ref().map_or(0, |m| 3 + m.len()) + p.data.len();
        HEADER_LEN
            + match &self.body {
                Body::Setup(s) => {
                    12 + s.resume_token.as_ref().map_or(0, |t| 2 + t.len())
                        + 2
                        + s.metadata_mime.len()
                        + s.data_mime.len()
                        + payload(&s.payload)
                }
                Body::Lease { metadata, .. } => 8 + metadata.as_ref().map_or(0, Bytes::len),
                Body::Keepalive { data, .. } => 8 + data.len(),
                Body::RequestResponse { payload: p, .. }
                | Body::RequestFnf { payload: p, .. }
                | Body::Payload { payload: p, .. } => payload(p),
                Body::RequestStream { payload: p, .. }
                | Body::RequestChannel { payload: p, .. } => 4 + payload(p),
                Body::RequestN(_) => 4,
                Body::Cancel | Body::Ignored { .. } => 0,
                Body::Error { data, .. } => 4 + data.len(),
                Body::MetadataPush(m) => m.len(),
            }
    }

    /// Append the frame to `dst` (without the transport's length prefix).
    ///
    /// # Errors
    ///
    /// [`FrameError::TooLarge`] when a value does not fit its field (a stream id or
    /// request count above 2^31 − 1, metadata of 2^24 bytes or more, a MIME type over
    /// 255 bytes, a resume token over 65,535) or the frame exceeds
    /// [`MAX_FRAME_LEN`]; [`FrameError::Zero`] for a request count of 0;
    /// [`FrameError::EmptyPayload`] for a PAYLOAD without next or complete;
    /// [`FrameError::UnknownType`] for [`Body::Ignored`], which is only received.
    /// Nothing is written on error.
    pub fn encode(&self, dst: &mut BytesMut) -> Result<(), FrameError> {
        self.validate()?;
        let len = self.encoded_len();
        if len > MAX_FRAME_LEN {
            return Err(FrameError::TooLarge {
                field: "frame",
                value: len,
            });
        }
        dst.reserve(len);
        let (frame_type, flags) = self.type_and_flags();
        dst.put_u32(self.stream);
        dst.put_u16(u16::from(frame_type) << 10 | flags);
        match &self.body {
            Body::Setup(s) => {
                dst.put_u16(s.major);
                dst.put_u16(s.minor);
                dst.put_u32(s.keepalive_ms);
                dst.put_u32(s.max_lifetime_ms);
                if let Some(token) = &s.resume_token {
                    dst.put_u16(token.len() as u16);
                    dst.put_slice(token);
                }
                dst.put_u8(s.metadata_mime.len() as u8);
                dst.put_slice(&s.metadata_mime);
                dst.put_u8(s.data_mime.len() as u8);
                dst.put_slice(&s.data_mime);
                put_payload(dst, &s.payload);
            }
            Body::Lease {
                ttl_ms,
                requests,
                metadata,
            } => {
                dst.put_u32(*ttl_ms);
                dst.put_u32(*requests);
                if let Some(m) = metadata {
                    dst.put_slice(m);
                }
            }
            Body::Keepalive {
                last_position,
                data,
                ..
            } => {
                dst.put_u64(*last_position);
                dst.put_slice(data);
            }
            Body::RequestResponse { payload, .. }
            | Body::RequestFnf { payload, .. }
            | Body::Payload { payload, .. } => put_payload(dst, payload),
            Body::RequestStream {
                initial_n, payload, ..
            }
            | Body::RequestChannel {
                initial_n, payload, ..
            } => {
                dst.put_u32(*initial_n);
                put_payload(dst, payload);
            }
            Body::RequestN(n) => dst.put_u32(*n),
            Body::Cancel | Body::Ignored { .. } => {}
            Body::Error { code, data } => {
                dst.put_u32(code.0);
                dst.put_slice(data);
            }
            Body::MetadataPush(m) => dst.put_slice(m),
        }
        Ok(())
    }

    /// The frame encoded into a new buffer; see [`encode`](Self::encode).
    ///
    /// # Errors
    ///
    /// As [`encode`](Self::encode).
    pub fn to_bytes(&self) -> Result<Bytes, FrameError> {
        let mut dst = BytesMut::with_capacity(self.encoded_len());
        self.encode(&mut dst)?;
        Ok(dst.freeze())
    }

    fn type_and_flags(&self) -> (u8, u16) {
        let meta = |p: &Payload| {
            if p.metadata.is_some() {
                flag::METADATA
            } else {
                0
            }
        };
        let bit = |on: bool, f: u16| if on { f } else { 0 };
        match &self.body {
            Body::Setup(s) => (
                kind::SETUP,
                meta(&s.payload)
                    | bit(s.resume_token.is_some(), flag::RESUME)
                    | bit(s.lease, flag::LEASE),
            ),
            Body::Lease { metadata, .. } => (kind::LEASE, bit(metadata.is_some(), flag::METADATA)),
            Body::Keepalive { respond, .. } => (kind::KEEPALIVE, bit(*respond, flag::RESPOND)),
            Body::RequestResponse { follows, payload } => (
                kind::REQUEST_RESPONSE,
                meta(payload) | bit(*follows, flag::FOLLOWS),
            ),
            Body::RequestFnf { follows, payload } => (
                kind::REQUEST_FNF,
                meta(payload) | bit(*follows, flag::FOLLOWS),
            ),
            Body::RequestStream {
                follows, payload, ..
            } => (
                kind::REQUEST_STREAM,
                meta(payload) | bit(*follows, flag::FOLLOWS),
            ),
            Body::RequestChannel {
                follows,
                complete,
                payload,
                ..
            } => (
                kind::REQUEST_CHANNEL,
                meta(payload) | bit(*follows, flag::FOLLOWS) | bit(*complete, flag::COMPLETE),
            ),
            Body::RequestN(_) => (kind::REQUEST_N, 0),
            Body::Cancel => (kind::CANCEL, 0),
            Body::Payload {
                follows,
                complete,
                next,
                payload,
            } => (
                kind::PAYLOAD,
                meta(payload)
                    | bit(*follows, flag::FOLLOWS)
                    | bit(*complete, flag::COMPLETE)
                    | bit(*next, flag::NEXT),
            ),
            Body::Error { .. } => (kind::ERROR, 0),
            Body::MetadataPush(_) => (kind::METADATA_PUSH, flag::METADATA),
            Body::Ignored { frame_type } => (*frame_type, flag::IGNORE),
        }
    }

    /// The checks of `encode`, so that what it writes decodes to the same frame.
    fn validate(&self) -> Result<(), FrameError> {
        let too_large = |field, value: usize| Err(FrameError::TooLarge { field, value });
        let payload = |p: &Payload| match &p.metadata {
            Some(m) if m.len() > MAX_METADATA_LEN => too_large("metadata length", m.len()),
            _ => Ok(()),
        };
        let positive = |field, n: u32| match n {
            0 => Err(FrameError::Zero(field)),
            n if n > MAX_U31 => too_large(field, n as usize),
            _ => Ok(()),
        };
        let frame_type = self.type_and_flags().0;
        if self.stream > MAX_U31 {
            return too_large("stream id", self.stream as usize);
        }
        check_stream(frame_type, self.stream)?;
        match &self.body {
            Body::Setup(s) => {
                positive("time between keepalives", s.keepalive_ms)?;
                positive("max lifetime", s.max_lifetime_ms)?;
                if let Some(token) = &s.resume_token {
                    if token.len() > usize::from(u16::MAX) {
                        return too_large("resume token length", token.len());
                    }
                }
                if s.metadata_mime.len() > 255 {
                    return too_large("metadata MIME length", s.metadata_mime.len());
                }
                if s.data_mime.len() > 255 {
                    return too_large("data MIME length", s.data_mime.len());
                }
                payload(&s.payload)
            }
            Body::Lease {
                ttl_ms, requests, ..
            } => {
                if *ttl_ms > MAX_U31 {
                    return too_large("lease time-to-live", *ttl_ms as usize);
                }
                if *requests > MAX_U31 {
                    return too_large("lease number of requests", *requests as usize);
                }
                Ok(())
            }
            Body::Keepalive { last_position, .. } => {
                if *last_position > u64::MAX >> 1 {
                    return Err(FrameError::ReservedBit("last received position"));
                }
                Ok(())
            }
            Body::RequestResponse { payload: p, .. } | Body::RequestFnf { payload: p, .. } => {
                payload(p)
            }
            Body::RequestStream {
                initial_n,
                payload: p,
                ..
            }
            | Body::RequestChannel {
                initial_n,
                payload: p,
                ..
            } => {
                positive("initial request n", *initial_n)?;
                payload(p)
            }
            Body::RequestN(n) => positive("request n", *n),
            Body::Payload {
                complete,
                next,
                payload: p,
                ..
            } => {
                if !complete && !next {
                    return Err(FrameError::EmptyPayload);
                }
                payload(p)
            }
            Body::Cancel | Body::Error { .. } | Body::MetadataPush(_) => Ok(()),
            Body::Ignored { frame_type } => Err(FrameError::UnknownType(*frame_type)),
        }
    }
}

/// A connection frame (SETUP, LEASE, KEEPALIVE, METADATA_PUSH) must travel on stream
/// 0, a stream frame (the requests, REQUEST_N, CANCEL, PAYLOAD) on a stream above 0;
/// ERROR and unknown types may travel on either.
fn check_stream(frame_type: u8, stream: u32) -> Result<(), FrameError> {
    let on_connection = matches!(
        frame_type,
        kind::SETUP | kind::LEASE | kind::KEEPALIVE | kind::METADATA_PUSH
    );
    let on_stream = matches!(
        frame_type,
        kind::REQUEST_RESPONSE
            | kind::REQUEST_FNF
            | kind::REQUEST_STREAM
            | kind::REQUEST_CHANNEL
            | kind::REQUEST_N
            | kind::CANCEL
            | kind::PAYLOAD
    );
    if (on_connection && stream != 0) || (on_stream && stream == 0) {
        return Err(FrameError::WrongStream { frame_type, stream });
    }
    Ok(())
}

/// Append a PAYLOAD frame with NEXT (and COMPLETE when `complete`) carrying `payload`
/// whole on `stream`, behind a big-endian length prefix of `prefix` bytes: what
/// [`Frame::encode`] writes for that frame, without building it. The caller keeps
/// the frame within [`MAX_FRAME_LEN`] and `stream` within 31 bits (the writer's
/// items, checked against the fragment size, which is at most that).
pub(crate) fn put_next(
    dst: &mut BytesMut,
    prefix: usize,
    stream: u32,
    complete: bool,
    payload: &Payload,
) {
    let len =
        HEADER_LEN + payload.metadata.as_ref().map_or(0, |m| 3 + m.len()) + payload.data.len();
    // A frame over the limit would wrap its length prefix and break the framing of
    // everything after it: refuse it loudly (the writer's check against the fragment
    // size keeps it from happening).
    assert!(
        len <= MAX_FRAME_LEN,
        "rsocket: a {len}-byte frame is over the 24-bit length prefix's limit"
    );
    debug_assert!(stream <= MAX_U31 && stream != 0);
    let mut flags = flag::NEXT;
    if complete {
        flags |= flag::COMPLETE;
    }
    if payload.metadata.is_some() {
        flags |= flag::METADATA;
    }
    dst.reserve(prefix + len);
    dst.put_uint(len as u64, prefix);
    dst.put_u32(stream);
    dst.put_u16((u16::from(kind::PAYLOAD) << 10) | flags);
    put_payload(dst, payload);
}

fn put_payload(dst: &mut BytesMut, payload: &Payload) {
    if let Some(m) = &payload.metadata {
        let len = m.len();
        dst.put_u8((len >> 16) as u8);
        dst.put_u16(len as u16);
        dst.put_slice(m);
    }
    dst.put_slice(&payload.data);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The reader's shortcut agrees with the decoder on any bytes, and on bytes
        /// that start like a PAYLOAD (arbitrary flags and stream, reserved bit too).
        #[test]
        fn plain_next_agrees_with_decode(
            bytes in proptest::collection::vec(any::<u8>(), 0..24),
            stream in any::<u32>(),
            flags in 0u16..0x400,
            payload_type in any::<bool>(),
        ) {
            let mut framed = bytes.clone();
            if payload_type && framed.len() >= HEADER_LEN {
                framed[..4].copy_from_slice(&stream.to_be_bytes());
                let type_and_flags = (u16::from(kind::PAYLOAD) << 10) | flags;
                framed[4..6].copy_from_slice(&type_and_flags.to_be_bytes());
            }
            for candidate in [bytes, framed] {
                if let Some((stream, complete)) = plain_next(&candidate) {
                    let frame = Frame::decode(Bytes::from(candidate.clone()))
                        .expect("a plain PAYLOAD decodes");
                    prop_assert_eq!(frame, Frame {
                        stream,
                        body: Body::Payload {
                            follows: false,
                            complete,
                            next: true,
                            payload: Payload::data(Bytes::copy_from_slice(&candidate[HEADER_LEN..])),
                        },
                    });
                }
            }
        }
    }

    proptest! {
        /// The writer's shortcut writes what `Frame::encode` writes.
        #[test]
        fn put_next_agrees_with_encode(
            stream in 1..=MAX_U31,
            complete in any::<bool>(),
            metadata in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..8)),
            data in proptest::collection::vec(any::<u8>(), 0..16),
        ) {
            let payload = Payload {
                metadata: metadata.map(Bytes::from),
                data: Bytes::from(data),
            };
            let frame = Frame {
                stream,
                body: Body::Payload { follows: false, complete, next: true, payload: payload.clone() },
            };
            let mut expected = BytesMut::new();
            let len = frame.encoded_len();
            expected.put_uint(len as u64, 3);
            frame.encode(&mut expected).expect("a valid frame");
            let mut written = BytesMut::new();
            put_next(&mut written, 3, stream, complete, &payload);
            prop_assert_eq!(written, expected);
        }
    }

    /// Every plain item frame the encoder makes is recognised.
    #[test]
    fn plain_next_recognises_encoded_items() {
        for (stream, complete) in [(1, false), (7, true), (MAX_U31, false)] {
            let frame = Frame {
                stream,
                body: Body::Payload {
                    follows: false,
                    complete,
                    next: true,
                    payload: Payload::data("item"),
                },
            };
            let bytes = frame.to_bytes().expect("a frame");
            assert_eq!(plain_next(&bytes), Some((stream, complete)));
        }
        let with_metadata = Frame {
            stream: 1,
            body: Body::Payload {
                follows: false,
                complete: false,
                next: true,
                payload: Payload {
                    metadata: Some(Bytes::from_static(b"m")),
                    data: Bytes::from_static(b"d"),
                },
            },
        };
        assert_eq!(
            plain_next(&with_metadata.to_bytes().expect("a frame")),
            None
        );
    }
}
