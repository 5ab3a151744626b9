"""rsocket-py server of the RSocket interop tests.

Answers the interop service described in the module docs of
`tests/rsocket/peers/mod.rs` over TCP on 127.0.0.1 (a free port), printing
`port <n>` once it listens, and runs until killed. Everything it sends is
fragmented at 65,536 bytes (rsocket-py counts the 3-byte frame length of the TCP
transport in it: a fragment's frame is at most 65,533 bytes after its length).

Run with rsocket-py on PYTHONPATH (`python3 server.py`); set RSOCKET_PY_DEBUG=1
to log every frame (rsocket-py's frame logger) on stderr.

Back-pressure: the request-stream and request-channel answers are reactive-streams
`Publisher`/`Subscription`s (rsocket-py's `reactivestreams` package) that emit only
what the requester asked for with REQUEST_N. rsocket-py queues whatever a publisher
emits into an unbounded send queue, so the stream publishers also wait until the
connection's queued PAYLOAD frames are written before emitting more: an `infinite`
stream requested without bound neither busy-loops nor buffers without bound.

Limits of rsocket-py (0.4.20) that touch the contract:
* a request's metadata is echoed when it is non-empty (rsocket-py does not tell an
  absent metadata from an empty one, so an empty metadata is answered without any);
* rsocket-py drops the NEXT flag of an empty PAYLOAD (empty data and metadata), so an
  empty answer or item would carry no value: `keep_next_flag_on_fragments` patches
  that one function at start-up (see its doc).
"""

import asyncio
import logging
import os
import sys
from collections import deque
from typing import Optional, Tuple

from reactivestreams.publisher import Publisher
from reactivestreams.subscriber import Subscriber
from reactivestreams.subscription import Subscription
from rsocket.extensions.mimetypes import WellKnownMimeTypes
from rsocket.frame import MAX_REQUEST_N, PayloadFrame
from rsocket.helpers import create_error_future, create_future
from rsocket.payload import Payload
from rsocket.request_handler import BaseRequestHandler
from rsocket.rsocket_server import RSocketServer
from rsocket.transports.tcp import TransportTCP

from patch import keep_next_flag_on_fragments

FRAGMENT_SIZE = 65_536
# PAYLOAD frames a connection may have queued but not yet written before the
# stream publishers wait.
MAX_QUEUED_PAYLOADS = 32
# Incoming channel items requested ahead of the answers sent.
CHANNEL_WINDOW = 16

fire_and_forget_count = 0


class InteropServer(RSocketServer):
    """A server connection that counts its queued PAYLOAD frames, so that publishers
    can wait for them to be written (`writable`)."""

    def __init__(self, transport: TransportTCP):
        self._queued_payloads = 0
        self._writable = asyncio.Event()
        self._writable.set()
        super().__init__(transport,
                         handler_factory=lambda: InteropHandler(self),
                         data_encoding=WellKnownMimeTypes.TEXT_PLAIN,
                         metadata_encoding=WellKnownMimeTypes.TEXT_PLAIN,
                         fragment_size_bytes=FRAGMENT_SIZE)

    def send_frame(self, frame):
        if isinstance(frame, PayloadFrame):
            if frame.sent_future is None:
                frame.sent_future = create_future()
            self._queued_payloads += 1
            if self._queued_payloads >= MAX_QUEUED_PAYLOADS:
                self._writable.clear()
            frame.sent_future.add_done_callback(self._payload_sent)
        super().send_frame(frame)

    def _payload_sent(self, _future):
        self._queued_payloads -= 1
        if self._queued_payloads < MAX_QUEUED_PAYLOADS:
            self._writable.set()

    async def writable(self):
        """Returns once fewer than MAX_QUEUED_PAYLOADS payloads wait to be written."""
        await self._writable.wait()


class CountingStream(Publisher, Subscription):
    """Items `0`, `1`, … (up to `count` when given, then complete; up to `fail_after`
    when given, then the error `stream failed`), each emitted only on demand."""

    def __init__(self, socket: InteropServer, count: Optional[int], fail_after: Optional[int]):
        self._socket = socket
        self._count = count
        self._fail_after = fail_after
        self._subscriber: Optional[Subscriber] = None
        self._demand = 0
        self._demand_event = asyncio.Event()
        self._task: Optional[asyncio.Task] = None
        self._cancelled = False

    def subscribe(self, subscriber: Subscriber):
        self._subscriber = subscriber
        subscriber.on_subscribe(self)
        self._task = asyncio.create_task(self._emit())

    def request(self, n: int):
        if n <= 0 or self._cancelled:
            return
        if n >= MAX_REQUEST_N or self._demand >= MAX_REQUEST_N:
            self._demand = MAX_REQUEST_N  # unbounded, as RSocket defines 2^31-1
        else:
            self._demand = min(self._demand + n, MAX_REQUEST_N - 1)
        self._demand_event.set()

    def cancel(self):
        self._cancelled = True
        if self._task is not None:
            self._task.cancel()

    async def _emit(self):
        try:
            index = 0
            while True:
                if self._count is not None and index >= self._count:
                    self._subscriber.on_complete()
                    return
                if self._fail_after is not None and index >= self._fail_after:
                    self._subscriber.on_error(RuntimeError('stream failed'))
                    return
                while self._demand == 0:
                    self._demand_event.clear()
                    await self._demand_event.wait()
                if self._demand < MAX_REQUEST_N:
                    self._demand -= 1
                self._subscriber.on_next(Payload(str(index).encode()))
                index += 1
                await self._socket.writable()
                await asyncio.sleep(0)
        except asyncio.CancelledError:
            pass


class UpperCaseChannel(Publisher, Subscription, Subscriber):
    """The request-channel answer: each incoming item (the first one given) in upper
    case, completing when the incoming stream completes. Incoming items are requested
    CHANNEL_WINDOW ahead of the answers sent, and answers are sent only on demand."""

    def __init__(self, first: Payload):
        self._pending = deque([upper(first)])
        self._demand = 0
        self._out: Optional[Subscriber] = None
        self._in: Optional[Subscription] = None
        self._in_requested = 0
        self._in_done = False
        self._in_error: Optional[Exception] = None
        self._finished = False
        self._scheduled = False

    # The outgoing side (this publisher, subscribed by rsocket-py's responder).
    def subscribe(self, subscriber: Subscriber):
        self._out = subscriber
        subscriber.on_subscribe(self)
        self._schedule()

    def request(self, n: int):
        if n <= 0:
            return
        self._demand = min(self._demand + n, MAX_REQUEST_N)
        self._schedule()

    def cancel(self):
        if not self._finished:
            self._finished = True
            if self._in is not None and not self._in_done:
                self._in.cancel()

    # The incoming side (the requester's items after the first one).
    def on_subscribe(self, subscription: Subscription):
        self._in = subscription
        self._schedule()

    def on_next(self, value: Payload, is_complete=False):
        self._in_requested -= 1
        self._pending.append(upper(value))
        if is_complete:
            self._in_done = True
        self._schedule()

    def on_error(self, exception: Exception):
        self._in_done = True
        self._in_error = exception
        self._schedule()

    def on_complete(self):
        self._in_done = True
        self._schedule()

    def _schedule(self):
        # Runs the work on the next loop turn, after rsocket-py finished handling the
        # current frame (so a request-channel frame that also completes is seen whole).
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_event_loop().call_soon(self._drain)

    def _drain(self):
        self._scheduled = False
        if self._finished or self._out is None:
            return
        while self._pending and self._demand > 0:
            if self._demand < MAX_REQUEST_N:
                self._demand -= 1
            self._out.on_next(self._pending.popleft())
        if self._in_done and not self._pending:
            self._finished = True
            if self._in_error is not None:
                self._out.on_error(self._in_error)
            else:
                self._out.on_complete()
            return
        if self._in is not None and not self._in_done:
            wanted = CHANNEL_WINDOW - len(self._pending) - self._in_requested
            if wanted > 0:
                self._in_requested += wanted
                self._in.request(wanted)


def upper(payload: Payload) -> Payload:
    return Payload(bytes(payload.data or b'').decode('utf-8', 'replace').upper().encode())


def big(n: int) -> bytes:
    pattern = bytes(range(251))
    return (pattern * (n // 251 + 1))[:n]


class InteropHandler(BaseRequestHandler):
    """The interop service (see tests/rsocket/peers/mod.rs)."""

    def __init__(self, socket: InteropServer):
        self._socket = socket

    async def request_response(self, payload: Payload):
        data = bytes(payload.data or b'')
        text = data.decode('utf-8', 'replace')
        if text.startswith('echo:'):
            metadata = bytes(payload.metadata) if payload.metadata else None
            return create_future(Payload(data[len('echo:'):], metadata))
        if text.startswith('fail:'):
            return create_error_future(RuntimeError(text[len('fail:'):]))
        if text.startswith('big:'):
            try:
                n = int(text[len('big:'):])
            except ValueError:
                return create_error_future(RuntimeError(f'bad request {text}'))
            return create_future(Payload(big(n)))
        if text.startswith('len:'):
            return create_future(Payload(f'{len(data)}:{sum(data) % 2 ** 32}'.encode()))
        if text == 'fnf-count':
            return create_future(Payload(str(fire_and_forget_count).encode()))
        return create_error_future(RuntimeError(f'unknown request {text}'))

    async def request_fire_and_forget(self, payload: Payload):
        global fire_and_forget_count
        fire_and_forget_count += 1

    async def request_stream(self, payload: Payload) -> Publisher:
        text = bytes(payload.data or b'').decode('utf-8', 'replace')
        if text == 'infinite':
            return CountingStream(self._socket, None, None)
        if text.startswith('fail-after:') and text[len('fail-after:'):].isdigit():
            return CountingStream(self._socket, None, int(text[len('fail-after:'):]))
        if text.isdigit():
            return CountingStream(self._socket, int(text), None)
        return FailedStream(f'unknown stream {text}')

    async def request_channel(self, payload: Payload) -> Tuple[Optional[Publisher], Optional[Subscriber]]:
        channel = UpperCaseChannel(payload)
        return channel, channel

    async def on_close(self, rsocket, exception: Optional[Exception] = None):
        connections.discard(self._socket)


class FailedStream(Publisher, Subscription):
    """A stream failing with `message` at once."""

    def __init__(self, message: str):
        self._message = message

    def subscribe(self, subscriber: Subscriber):
        subscriber.on_subscribe(self)
        asyncio.get_event_loop().call_soon(subscriber.on_error, RuntimeError(self._message))

    def request(self, n: int):
        pass

    def cancel(self):
        pass


# The open connections (kept referenced until they close).
connections = set()


def on_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
    connections.add(InteropServer(TransportTCP(reader, writer, read_buffer_size=FRAGMENT_SIZE)))


async def main():
    listener = await asyncio.start_server(on_connection, '127.0.0.1', 0)
    port = listener.sockets[0].getsockname()[1]
    print(f'port {port}', flush=True)
    async with listener:
        await listener.serve_forever()


if __name__ == '__main__':
    keep_next_flag_on_fragments()
    logging.basicConfig(level=logging.DEBUG if os.environ.get('RSOCKET_PY_DEBUG') else logging.ERROR,
                        stream=sys.stderr)
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
