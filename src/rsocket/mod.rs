//! RSocket, the protocol that carries Reactive Streams over a byte stream: per-stream
//! `REQUEST_N` credit across one connection.
//!
//! This module is being built in steps. What is here now is the wire format
//! ([`frame`]): every frame of RSocket 1.0, encoded and decoded without copying
//! payloads, and a decoder that refuses malformed input with a typed
//! [`FrameError`](frame::FrameError) (never a panic, never an allocation sized by a
//! length field it read).
//!
//! On TCP every frame is preceded by its length as a 24-bit big-endian integer;
//! [`frame::MAX_FRAME_LEN`] is the largest frame that prefix can describe.

pub mod frame;
