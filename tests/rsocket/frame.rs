//! `weir::rsocket::frame`: byte layouts written by hand from the protocol's tables,
//! round trips of every frame type, and arbitrary bytes (never a panic; whatever
//! decodes re-encodes to the same frame).

use bytes::{Bytes, BytesMut};
use proptest::prelude::*;
use weir::rsocket::frame::{
    Body, ErrorCode, Frame, FrameError, Payload, Setup, MAX_FRAME_LEN, MAX_U31,
};

fn decode(bytes: &[u8]) -> Result<Frame, FrameError> {
    Frame::decode(Bytes::copy_from_slice(bytes))
}

fn encode(frame: &Frame) -> Vec<u8> {
    frame.to_bytes().expect("a valid frame encodes").to_vec()
}

#[test]
fn request_n_has_the_protocols_layout() {
    let bytes = [0, 0, 0, 5, 0x20, 0x00, 0, 0, 0, 10];
    let frame = Frame {
        stream: 5,
        body: Body::RequestN(10),
    };
    assert_eq!(decode(&bytes), Ok(frame.clone()));
    assert_eq!(encode(&frame), bytes);
}

#[test]
fn payload_with_metadata_next_and_complete_has_the_protocols_layout() {
    // Type 0x0A in the top 6 bits, then M (0x100), C (0x40), N (0x20).
    let bytes = [0, 0, 0, 1, 0x29, 0x60, 0, 0, 1, b'm', b'd', b'a'];
    let frame = Frame {
        stream: 1,
        body: Body::Payload {
            follows: false,
            complete: true,
            next: true,
            payload: Payload {
                metadata: Some(Bytes::from_static(b"m")),
                data: Bytes::from_static(b"da"),
            },
        },
    };
    assert_eq!(decode(&bytes), Ok(frame.clone()));
    assert_eq!(encode(&frame), bytes);
}

#[test]
fn setup_has_the_protocols_layout() {
    let mut bytes = vec![0, 0, 0, 0, 0x04, 0x00, 0, 1, 0, 0];
    bytes.extend_from_slice(&500u32.to_be_bytes());
    bytes.extend_from_slice(&10_000u32.to_be_bytes());
    bytes.push(4);
    bytes.extend_from_slice(b"text");
    bytes.push(4);
    bytes.extend_from_slice(b"json");
    bytes.extend_from_slice(b"hi");
    let frame = Frame {
        stream: 0,
        body: Body::Setup(Box::new(Setup {
            major: 1,
            minor: 0,
            keepalive_ms: 500,
            max_lifetime_ms: 10_000,
            resume_token: None,
            lease: false,
            metadata_mime: Bytes::from_static(b"text"),
            data_mime: Bytes::from_static(b"json"),
            payload: Payload::data(&b"hi"[..]),
        })),
    };
    assert_eq!(decode(&bytes), Ok(frame.clone()));
    assert_eq!(encode(&frame), bytes);
}

#[test]
fn keepalive_and_error_have_the_protocols_layout() {
    let mut bytes = vec![0, 0, 0, 0, 0x0C, 0x80];
    bytes.extend_from_slice(&7u64.to_be_bytes());
    bytes.extend_from_slice(b"ping");
    let frame = Frame {
        stream: 0,
        body: Body::Keepalive {
            respond: true,
            last_position: 7,
            data: Bytes::from_static(b"ping"),
        },
    };
    assert_eq!(decode(&bytes), Ok(frame.clone()));
    assert_eq!(encode(&frame), bytes);

    let bytes = [0, 0, 0, 3, 0x2C, 0x00, 0, 0, 0x02, 0x01, b'n', b'o'];
    let frame = Frame {
        stream: 3,
        body: Body::Error {
            code: ErrorCode::APPLICATION_ERROR,
            data: Bytes::from_static(b"no"),
        },
    };
    assert_eq!(decode(&bytes), Ok(frame.clone()));
    assert_eq!(encode(&frame), bytes);
    assert!(!ErrorCode::APPLICATION_ERROR.is_connection_error());
    assert!(ErrorCode::CONNECTION_ERROR.is_connection_error());
}

#[test]
fn decoded_payloads_share_the_frames_buffer() {
    let frame = Frame {
        stream: 9,
        body: Body::RequestStream {
            follows: false,
            initial_n: 3,
            payload: Payload {
                metadata: Some(Bytes::from_static(b"route")),
                data: Bytes::from(vec![7u8; 4096]),
            },
        },
    };
    let bytes = frame.to_bytes().unwrap();
    let range = bytes.as_ptr_range();
    let Body::RequestStream { payload, .. } = Frame::decode(bytes.clone()).unwrap().body else {
        panic!("a REQUEST_STREAM decodes to one");
    };
    assert!(range.contains(&payload.data.as_ptr()), "data was copied");
    assert!(
        range.contains(&payload.metadata.unwrap().as_ptr()),
        "metadata was copied"
    );
}

#[test]
fn malformed_frames_are_refused_with_the_field_named() {
    // The header is cut.
    assert!(matches!(
        decode(&[0, 0, 0]),
        Err(FrameError::Truncated {
            frame_type: None,
            field: "stream id",
            needed: 4,
            left: 3
        })
    ));
    assert!(matches!(
        decode(&[0, 0, 0, 1, 0x20]),
        Err(FrameError::Truncated {
            field: "frame type and flags",
            ..
        })
    ));
    // REQUEST_N without its count, and with a count of 0.
    assert!(matches!(
        decode(&[0, 0, 0, 1, 0x20, 0x00, 0, 0]),
        Err(FrameError::Truncated {
            frame_type: Some(0x08),
            field: "request n",
            needed: 4,
            left: 2
        })
    ));
    assert_eq!(
        decode(&[0, 0, 0, 1, 0x20, 0x00, 0, 0, 0, 0]),
        Err(FrameError::Zero("request n"))
    );
    // The reserved top bit of a request count, and of the stream id.
    assert_eq!(
        decode(&[0, 0, 0, 1, 0x20, 0x00, 0x80, 0, 0, 1]),
        Err(FrameError::ReservedBit("request n"))
    );
    assert_eq!(
        decode(&[0x80, 0, 0, 1, 0x20, 0x00, 0, 0, 0, 1]),
        Err(FrameError::ReservedBit("stream id"))
    );
    // Bytes after a fixed-length frame.
    assert_eq!(
        decode(&[0, 0, 0, 1, 0x24, 0x00, 0]),
        Err(FrameError::TrailingBytes {
            frame_type: 0x09,
            extra: 1
        })
    );
    // Metadata longer than the frame: refused, nothing allocated for it.
    let err = decode(&[0, 0, 0, 1, 0x29, 0x20, 0xFF, 0xFF, 0xFF, b'x']).unwrap_err();
    assert_eq!(
        err,
        FrameError::Truncated {
            frame_type: Some(0x0A),
            field: "metadata",
            needed: (1 << 24) - 1,
            left: 1
        }
    );
    assert!(
        err.to_string()
            .contains("metadata needs 16777215 bytes, 1 left"),
        "{err}"
    );
    // A PAYLOAD that signals nothing.
    assert_eq!(
        decode(&[0, 0, 0, 1, 0x28, 0x00]),
        Err(FrameError::EmptyPayload)
    );
    // Stream frames on stream 0, connection frames on a stream.
    assert_eq!(
        decode(&[0, 0, 0, 0, 0x28, 0x20]),
        Err(FrameError::WrongStream {
            frame_type: 0x0A,
            stream: 0
        })
    );
    let mut keepalive = vec![0, 0, 0, 2, 0x0C, 0x00];
    keepalive.extend_from_slice(&0u64.to_be_bytes());
    assert_eq!(
        decode(&keepalive),
        Err(FrameError::WrongStream {
            frame_type: 0x03,
            stream: 2
        })
    );
    // SETUP with a keepalive interval of 0.
    let mut setup = vec![0, 0, 0, 0, 0x04, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
    setup.extend_from_slice(&1u32.to_be_bytes());
    setup.extend_from_slice(&[0, 0]);
    assert_eq!(
        decode(&setup),
        Err(FrameError::Zero("time between keepalives"))
    );
}

#[test]
fn unknown_types_are_errors_unless_ignorable() {
    // Type 0x3F (EXT) and 0x0D (RESUME), without and with the ignore flag (0x200).
    assert_eq!(
        decode(&[0, 0, 0, 1, 0xFC, 0x00, 1, 2]),
        Err(FrameError::UnknownType(0x3F))
    );
    assert_eq!(
        decode(&[0, 0, 0, 1, 0xFE, 0x00, 1, 2]),
        Ok(Frame {
            stream: 1,
            body: Body::Ignored { frame_type: 0x3F }
        })
    );
    assert_eq!(
        decode(&[0, 0, 0, 0, 0x34, 0x00]),
        Err(FrameError::UnknownType(0x0D))
    );
    // Ignored frames are only received.
    let ignored = Frame {
        stream: 1,
        body: Body::Ignored { frame_type: 0x3F },
    };
    assert_eq!(ignored.to_bytes(), Err(FrameError::UnknownType(0x3F)));
}

#[test]
fn frames_over_the_protocols_limit_are_refused_both_ways() {
    let too_long = Bytes::from(vec![0u8; MAX_FRAME_LEN + 1]);
    assert_eq!(
        Frame::decode(too_long),
        Err(FrameError::TooLong(MAX_FRAME_LEN + 1))
    );
    let frame = Frame {
        stream: 1,
        body: Body::Payload {
            follows: false,
            complete: false,
            next: true,
            payload: Payload::data(vec![0u8; MAX_FRAME_LEN]),
        },
    };
    let mut dst = BytesMut::new();
    assert_eq!(
        frame.encode(&mut dst),
        Err(FrameError::TooLarge {
            field: "frame",
            value: MAX_FRAME_LEN + 6
        })
    );
    assert!(dst.is_empty(), "nothing is written on error");
}

#[test]
fn encode_refuses_values_that_do_not_fit_their_fields() {
    let cases = [
        (
            Frame {
                stream: MAX_U31 + 1,
                body: Body::Cancel,
            },
            "stream id",
        ),
        (
            Frame {
                stream: 1,
                body: Body::RequestN(MAX_U31 + 1),
            },
            "request n",
        ),
    ];
    for (frame, field) in cases {
        match frame.to_bytes() {
            Err(FrameError::TooLarge { field: f, .. }) => assert_eq!(f, field),
            other => panic!("{field}: {other:?}"),
        }
    }
    assert_eq!(
        Frame {
            stream: 1,
            body: Body::RequestN(0)
        }
        .to_bytes(),
        Err(FrameError::Zero("request n"))
    );
    assert_eq!(
        Frame {
            stream: 0,
            body: Body::Cancel
        }
        .to_bytes(),
        Err(FrameError::WrongStream {
            frame_type: 0x09,
            stream: 0
        })
    );
    let long_mime = Frame {
        stream: 0,
        body: Body::Setup(Box::new(Setup {
            major: 1,
            minor: 0,
            keepalive_ms: 1,
            max_lifetime_ms: 1,
            resume_token: None,
            lease: false,
            metadata_mime: Bytes::from(vec![b'a'; 256]),
            data_mime: Bytes::new(),
            payload: Payload::default(),
        })),
    };
    assert_eq!(
        long_mime.to_bytes(),
        Err(FrameError::TooLarge {
            field: "metadata MIME length",
            value: 256
        })
    );
}

fn bytes(max: usize) -> impl Strategy<Value = Bytes> {
    proptest::collection::vec(any::<u8>(), 0..max).prop_map(Bytes::from)
}

fn payload() -> impl Strategy<Value = Payload> {
    (proptest::option::of(bytes(40)), bytes(40))
        .prop_map(|(metadata, data)| Payload { metadata, data })
}

fn stream_id() -> impl Strategy<Value = u32> {
    1..=MAX_U31
}

fn positive() -> impl Strategy<Value = u32> {
    1..=MAX_U31
}

fn frame() -> impl Strategy<Value = Frame> {
    let on_stream = |body: BoxedStrategy<Body>| {
        (stream_id(), body).prop_map(|(stream, body)| Frame { stream, body })
    };
    let on_connection = |body: BoxedStrategy<Body>| body.prop_map(|body| Frame { stream: 0, body });
    prop_oneof![
        on_connection(
            (
                any::<u16>(),
                any::<u16>(),
                positive(),
                positive(),
                proptest::option::of(bytes(20)),
                any::<bool>(),
                bytes(20),
                bytes(20),
                payload()
            )
                .prop_map(
                    |(
                        major,
                        minor,
                        keepalive_ms,
                        max_lifetime_ms,
                        resume_token,
                        lease,
                        metadata_mime,
                        data_mime,
                        payload,
                    )| {
                        Body::Setup(Box::new(Setup {
                            major,
                            minor,
                            keepalive_ms,
                            max_lifetime_ms,
                            resume_token,
                            lease,
                            metadata_mime,
                            data_mime,
                            payload,
                        }))
                    }
                )
                .boxed()
        ),
        on_connection(
            (0..=MAX_U31, 0..=MAX_U31, proptest::option::of(bytes(20)))
                .prop_map(|(ttl_ms, requests, metadata)| Body::Lease {
                    ttl_ms,
                    requests,
                    metadata
                })
                .boxed()
        ),
        on_connection(
            (any::<bool>(), 0..=u64::MAX >> 1, bytes(20))
                .prop_map(|(respond, last_position, data)| Body::Keepalive {
                    respond,
                    last_position,
                    data
                })
                .boxed()
        ),
        on_connection(bytes(40).prop_map(Body::MetadataPush).boxed()),
        on_stream(
            (any::<bool>(), payload())
                .prop_map(|(follows, payload)| Body::RequestResponse { follows, payload })
                .boxed()
        ),
        on_stream(
            (any::<bool>(), payload())
                .prop_map(|(follows, payload)| Body::RequestFnf { follows, payload })
                .boxed()
        ),
        on_stream(
            (any::<bool>(), positive(), payload())
                .prop_map(|(follows, initial_n, payload)| Body::RequestStream {
                    follows,
                    initial_n,
                    payload
                })
                .boxed()
        ),
        on_stream(
            (any::<bool>(), any::<bool>(), positive(), payload())
                .prop_map(
                    |(follows, complete, initial_n, payload)| Body::RequestChannel {
                        follows,
                        complete,
                        initial_n,
                        payload
                    }
                )
                .boxed()
        ),
        on_stream(positive().prop_map(Body::RequestN).boxed()),
        on_stream(Just(Body::Cancel).boxed()),
        on_stream(
            (any::<bool>(), 1u8..4, payload())
                .prop_map(|(follows, signals, payload)| Body::Payload {
                    follows,
                    complete: signals & 1 != 0,
                    next: signals & 2 != 0,
                    payload
                })
                .boxed()
        ),
        (0..=MAX_U31, any::<u32>(), bytes(40)).prop_map(|(stream, code, data)| Frame {
            stream,
            body: Body::Error {
                code: ErrorCode(code),
                data
            }
        }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn every_valid_frame_round_trips(frame in frame()) {
        let bytes = frame.to_bytes().unwrap();
        prop_assert_eq!(bytes.len(), frame.encoded_len());
        prop_assert_eq!(Frame::decode(bytes).unwrap(), frame);
    }

    #[test]
    fn arbitrary_bytes_decode_or_fail_cleanly(raw in proptest::collection::vec(any::<u8>(), 0..64)) {
        // Never a panic; whatever decodes re-encodes to a frame that decodes the same.
        if let Ok(frame) = Frame::decode(Bytes::from(raw)) {
            if !matches!(frame.body, Body::Ignored { .. }) {
                let again = Frame::decode(frame.to_bytes().unwrap()).unwrap();
                prop_assert_eq!(again, frame);
            }
        }
    }

    #[test]
    fn every_cut_of_a_valid_frame_fails_cleanly_or_decodes_a_shorter_payload(frame in frame(), cut in any::<prop::sample::Index>()) {
        let bytes = frame.to_bytes().unwrap();
        let cut = cut.index(bytes.len() + 1);
        // A prefix is either refused or (when the cut falls in trailing data) a frame
        // with less data; never a panic.
        if let Ok(shorter) = Frame::decode(bytes.slice(..cut)) {
            prop_assert!(shorter.encoded_len() <= frame.encoded_len());
        }
    }
}
