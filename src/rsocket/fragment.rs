//! Fragmentation and reassembly: a payload larger than the frame size travels as a
//! sequence of frames whose FOLLOWS flag says more is coming.
//!
//! Sending ([`split`]): the first frame is the payload's own kind (a request, or a
//! PAYLOAD), the others are PAYLOAD frames; metadata goes first, then data, each frame
//! filled up to the fragment size. A sequence counts as one item of credit, and the
//! writer sends all its frames back to back (other streams' frames may not come in
//! between on the same stream, so it never splits a sequence across turns).
//!
//! Receiving ([`Assembly`]): a frame with FOLLOWS starts (or continues) a stream's
//! partial payload; the frame without it completes it, and the reader then handles
//! the whole as if it had arrived in one frame. A partial payload larger than the
//! configured limit fails the stream (it never grows past the limit).

use std::collections::HashMap;

use bytes::{Bytes, BytesMut};

use super::frame::{Body, Frame, Payload, HEADER_LEN};

/// The smallest fragment size accepted: room for any frame's fixed fields plus a
/// metadata length and some bytes of payload.
pub const MIN_FRAGMENT: usize = 64;

/// What the first frame of a payload's sequence is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Lead {
    /// REQUEST_RESPONSE.
    Response,
    /// REQUEST_FNF.
    Fnf,
    /// REQUEST_STREAM with its initial credit.
    Stream { initial_n: u32 },
    /// REQUEST_CHANNEL with its initial credit; `complete`: the requester's stream
    /// ends with this payload.
    Channel { initial_n: u32, complete: bool },
    /// PAYLOAD with NEXT; `complete`: the stream ends with it.
    Next { complete: bool },
}

impl Lead {
    /// Bytes of the first frame that are not payload (header and fixed fields).
    fn overhead(self) -> usize {
        HEADER_LEN
            + match self {
                Lead::Stream { .. } | Lead::Channel { .. } => 4,
                _ => 0,
            }
    }

    /// The sequence ends its sender's stream.
    fn completes(self) -> bool {
        matches!(
            self,
            Lead::Next { complete: true } | Lead::Channel { complete: true, .. }
        )
    }

    fn body(self, follows: bool, payload: Payload) -> Body {
        match self {
            Lead::Response => Body::RequestResponse { follows, payload },
            Lead::Fnf => Body::RequestFnf { follows, payload },
            Lead::Stream { initial_n } => Body::RequestStream {
                follows,
                initial_n,
                payload,
            },
            Lead::Channel {
                initial_n,
                complete,
            } => Body::RequestChannel {
                follows,
                complete: complete && !follows,
                initial_n,
                payload,
            },
            Lead::Next { complete } => Body::Payload {
                follows,
                complete: complete && !follows,
                next: true,
                payload,
            },
        }
    }
}

/// The encoded length of one frame carrying `payload` whole.
fn whole_len(lead: Lead, payload: &Payload) -> usize {
    lead.overhead() + payload.metadata.as_ref().map_or(0, |m| 3 + m.len()) + payload.data.len()
}

/// `payload` travels whole in one PAYLOAD frame (NEXT) of at most `fragment` bytes.
pub(crate) fn fits(payload: &Payload, fragment: usize) -> bool {
    whole_len(Lead::Next { complete: false }, payload) <= fragment
}

/// Calls `emit` with the frames that carry `payload` on `stream`, each at most
/// `fragment` bytes (`fragment >= MIN_FRAGMENT`): one frame when it fits.
pub(crate) fn split(
    stream: u32,
    lead: Lead,
    payload: Payload,
    fragment: usize,
    mut emit: impl FnMut(Frame),
) {
    debug_assert!(fragment >= MIN_FRAGMENT);
    if whole_len(lead, &payload) <= fragment {
        emit(Frame {
            stream,
            body: lead.body(false, payload),
        });
        return;
    }
    let Payload {
        mut metadata,
        mut data,
    } = payload;
    let mut first = true;
    loop {
        let overhead = if first { lead.overhead() } else { HEADER_LEN };
        let mut room = fragment - overhead;
        let meta = metadata.take().map(|mut m| {
            room -= 3;
            let part = m.split_to(m.len().min(room));
            room -= part.len();
            if !m.is_empty() {
                metadata = Some(m);
            }
            part
        });
        let part = data.split_to(data.len().min(room));
        let follows = metadata.is_some() || !data.is_empty();
        let piece = Payload {
            metadata: meta,
            data: part,
        };
        let body = if first {
            lead.body(follows, piece)
        } else {
            Body::Payload {
                follows,
                complete: !follows && lead.completes(),
                next: true,
                payload: piece,
            }
        };
        emit(Frame { stream, body });
        if !follows {
            return;
        }
        first = false;
    }
}

/// Why a frame could not be added to a stream's partial payload.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum AssemblyError {
    /// The payload grew past the limit (its size so far).
    TooLarge(usize),
    /// A frame other than PAYLOAD arrived in the middle of a sequence.
    Interrupted,
}

/// A partial payload: its first frame (with an empty payload) and what arrived.
struct Partial {
    first: Body,
    metadata: Option<BytesMut>,
    data: BytesMut,
}

impl Partial {
    fn len(&self) -> usize {
        self.metadata.as_ref().map_or(0, BytesMut::len) + self.data.len()
    }

    fn append(&mut self, payload: Payload) {
        if let Some(m) = payload.metadata {
            self.metadata
                .get_or_insert_with(BytesMut::new)
                .extend_from_slice(&m);
        }
        self.data.extend_from_slice(&payload.data);
    }
}

/// The partial payloads of a connection's streams (the reader's).
pub(crate) struct Assembly {
    partial: HashMap<u32, Partial>,
    limit: usize,
}

impl Assembly {
    /// Partial payloads of at most `limit` bytes (metadata and data).
    pub(crate) fn new(limit: usize) -> Self {
        Assembly {
            partial: HashMap::new(),
            limit,
        }
    }

    /// Forget `stream`'s partial payload (the stream ended).
    pub(crate) fn forget(&mut self, stream: u32) {
        self.partial.remove(&stream);
    }

    /// Streams with a partial payload.
    #[cfg(test)]
    pub(crate) fn pending(&self) -> usize {
        self.partial.len()
    }

    /// No stream has a partial payload: a whole PAYLOAD needs no assembly.
    pub(crate) fn idle(&self) -> bool {
        self.partial.is_empty()
    }

    /// Feed one frame: `Ok(Some(frame))` is a whole frame to handle (the one given,
    /// or the sequence it completed), `Ok(None)` a fragment kept for later.
    pub(crate) fn feed(&mut self, frame: Frame) -> Result<Option<Frame>, AssemblyError> {
        let stream = frame.stream;
        if let Some(partial) = self.partial.get_mut(&stream) {
            let Body::Payload {
                follows,
                complete,
                payload,
                ..
            } = frame.body
            else {
                if matches!(frame.body, Body::Cancel | Body::Error { .. }) {
                    // The sender gave up on the sequence (allowed): drop the part.
                    self.partial.remove(&stream);
                    return Ok(Some(frame));
                }
                if matches!(frame.body, Body::RequestN(_)) {
                    return Ok(Some(frame));
                }
                self.partial.remove(&stream);
                return Err(AssemblyError::Interrupted);
            };
            let size = partial.len()
                + payload.metadata.as_ref().map_or(0, Bytes::len)
                + payload.data.len();
            if size > self.limit {
                self.partial.remove(&stream);
                return Err(AssemblyError::TooLarge(size));
            }
            partial.append(payload);
            if follows {
                return Ok(None);
            }
            let partial = self.partial.remove(&stream).expect("present");
            let whole = Payload {
                metadata: partial.metadata.map(BytesMut::freeze),
                data: partial.data.freeze(),
            };
            let body = finish(partial.first, whole, complete);
            return Ok(Some(Frame { stream, body }));
        }
        let (follows, payload) = match &frame.body {
            Body::RequestResponse { follows, payload }
            | Body::RequestFnf { follows, payload }
            | Body::RequestStream {
                follows, payload, ..
            }
            | Body::RequestChannel {
                follows, payload, ..
            }
            | Body::Payload {
                follows, payload, ..
            } => (*follows, payload),
            _ => return Ok(Some(frame)),
        };
        if !follows {
            return Ok(Some(frame));
        }
        let size = payload.metadata.as_ref().map_or(0, Bytes::len) + payload.data.len();
        if size > self.limit {
            return Err(AssemblyError::TooLarge(size));
        }
        let mut partial = Partial {
            first: frame.body,
            metadata: None,
            data: BytesMut::new(),
        };
        let payload = take_payload(&mut partial.first);
        partial.append(payload);
        self.partial.insert(stream, partial);
        Ok(None)
    }
}

/// Move the payload out of a frame body that carries one (leaving it empty).
fn take_payload(body: &mut Body) -> Payload {
    match body {
        Body::RequestResponse { payload, .. }
        | Body::RequestFnf { payload, .. }
        | Body::RequestStream { payload, .. }
        | Body::RequestChannel { payload, .. }
        | Body::Payload { payload, .. } => std::mem::take(payload),
        _ => Payload::default(),
    }
}

/// The first frame's body with the whole payload, FOLLOWS cleared, and the final
/// fragment's COMPLETE flag.
fn finish(first: Body, whole: Payload, last_complete: bool) -> Body {
    match first {
        Body::RequestResponse { .. } => Body::RequestResponse {
            follows: false,
            payload: whole,
        },
        Body::RequestFnf { .. } => Body::RequestFnf {
            follows: false,
            payload: whole,
        },
        Body::RequestStream { initial_n, .. } => Body::RequestStream {
            follows: false,
            initial_n,
            payload: whole,
        },
        Body::RequestChannel {
            initial_n,
            complete,
            ..
        } => Body::RequestChannel {
            follows: false,
            complete: complete || last_complete,
            initial_n,
            payload: whole,
        },
        Body::Payload { complete, .. } => Body::Payload {
            follows: false,
            complete: complete || last_complete,
            next: true,
            payload: whole,
        },
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(lead: Lead, payload: Payload, fragment: usize) -> Vec<Frame> {
        let mut out = Vec::new();
        split(7, lead, payload, fragment, |f| out.push(f));
        out
    }

    fn pattern(n: usize) -> Bytes {
        (0..n).map(|i| (i % 251) as u8).collect::<Vec<_>>().into()
    }

    #[test]
    fn a_payload_that_fits_is_one_frame() {
        let out = frames(Lead::Next { complete: true }, Payload::data("hi"), 64);
        assert_eq!(out.len(), 1);
        assert!(matches!(
            out[0].body,
            Body::Payload {
                follows: false,
                complete: true,
                next: true,
                ..
            }
        ));
    }

    #[test]
    fn every_fragment_fits_and_reassembly_restores_the_payload() {
        for lead in [
            Lead::Response,
            Lead::Fnf,
            Lead::Stream { initial_n: 5 },
            Lead::Channel {
                initial_n: 3,
                complete: true,
            },
            Lead::Next { complete: true },
            Lead::Next { complete: false },
        ] {
            for (meta, data) in [
                (None, 1000),
                (Some(300), 1000),
                (Some(1000), 0),
                (Some(0), 500),
            ] {
                let payload = Payload {
                    metadata: meta.map(pattern),
                    data: pattern(data),
                };
                let out = frames(lead, payload.clone(), 100);
                assert!(out.len() > 1 || meta.is_none() && data < 90);
                let mut assembly = Assembly::new(10_000);
                let mut whole = None;
                for (i, frame) in out.iter().enumerate() {
                    assert!(frame.encoded_len() <= 100, "{lead:?}: frame {i} too long");
                    let fed = assembly.feed(frame.clone()).unwrap();
                    assert_eq!(fed.is_some(), i + 1 == out.len());
                    whole = fed;
                }
                let whole = whole.unwrap();
                assert_eq!(whole, {
                    let mut one = Vec::new();
                    split(7, lead, payload, usize::MAX >> 1, |f| one.push(f));
                    one.pop().unwrap()
                });
                assert_eq!(assembly.pending(), 0);
            }
        }
    }

    #[test]
    fn a_partial_payload_over_the_limit_fails_without_growing() {
        let out = frames(
            Lead::Next { complete: false },
            Payload::data(pattern(1000)),
            100,
        );
        let mut assembly = Assembly::new(300);
        let mut result = Ok(None);
        for frame in out {
            result = assembly.feed(frame);
            if result.is_err() {
                break;
            }
        }
        assert!(matches!(result, Err(AssemblyError::TooLarge(n)) if n <= 400));
        assert_eq!(assembly.pending(), 0);
    }

    #[test]
    fn another_frame_type_in_a_sequence_is_an_error_and_cancel_drops_it() {
        let out = frames(
            Lead::Next { complete: false },
            Payload::data(pattern(300)),
            100,
        );
        let mut assembly = Assembly::new(10_000);
        assert_eq!(assembly.feed(out[0].clone()), Ok(None));
        let interrupt = Frame {
            stream: 7,
            body: Body::RequestStream {
                follows: false,
                initial_n: 1,
                payload: Payload::data("x"),
            },
        };
        assert_eq!(assembly.feed(interrupt), Err(AssemblyError::Interrupted));
        assert_eq!(assembly.feed(out[0].clone()), Ok(None));
        let cancel = Frame {
            stream: 7,
            body: Body::Cancel,
        };
        assert_eq!(assembly.feed(cancel.clone()), Ok(Some(cancel)));
        assert_eq!(assembly.pending(), 0);
    }
}
