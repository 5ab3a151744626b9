"""rsocket-py client of the RSocket interop tests.

`client.py <port> <scenario> [args...]` connects over TCP to 127.0.0.1:<port> and runs
one of the client scenarios described in the module docs of
`tests/rsocket/peers/mod.rs`, printing one line per event (flushed at once), then
exits 0. It exits non-zero only when the client itself broke, printing `timeout`
first when the scenario did not end within 30 seconds.

Everything it sends is fragmented at 65,536 bytes (rsocket-py counts the 3-byte frame
length of the TCP transport in it: a fragment's frame is at most 65,533 bytes after
its length); keepalive every 5 s, max lifetime 30 s. Run with rsocket-py on PYTHONPATH; set RSOCKET_PY_DEBUG=1 to log every frame
(rsocket-py's frame logger) on stderr.

Notes on the contract:
* `stream`: the REQUEST_STREAM frame carries `<batch>` as its initial request
  (rsocket-py's `initial_request_n`), then each `<batch>` received items send
  REQUEST_N `<batch>`. With `<cancel-after>`, reaching that many items prints
  `cancelled`; the CANCEL frame is sent unless that last item also completed the
  stream (then there is nothing left to cancel), so the output does not depend on
  whether a server completes with the last item or in a frame of its own.
* `channel`: the first item travels in the REQUEST_CHANNEL frame, the others are
  sent only as the server requests them (REQUEST_N); with a single item the
  REQUEST_CHANNEL frame itself completes the outgoing side. Answers are requested
  without bound (2^31-1).
* `response`: `metadata <m>` is printed when the answer's metadata is non-empty
  (rsocket-py does not tell an absent metadata from an empty one).
* rsocket-py (0.4.20) drops the NEXT flag of an empty PAYLOAD (empty data and
  metadata), so an empty channel item would carry no value:
  `keep_next_flag_on_fragments` patches that one function at start-up (see its doc).
"""

import asyncio
import logging
import os
import signal
import sys
from datetime import timedelta
from typing import List, Optional

from reactivestreams.publisher import Publisher
from reactivestreams.subscriber import Subscriber
from reactivestreams.subscription import Subscription
from rsocket.exceptions import RSocketProtocolError
from rsocket.extensions.mimetypes import WellKnownMimeTypes
from rsocket.helpers import single_transport_provider
from rsocket.payload import Payload
from rsocket.rsocket_client import RSocketClient
from rsocket.transports.tcp import TransportTCP

from patch import keep_next_flag_on_fragments

FRAGMENT_SIZE = 65_536
OVERALL_TIMEOUT_SECONDS = 30


def say(line: str):
    print(line, flush=True)


def text(data) -> str:
    return bytes(data or b'').decode('utf-8', 'replace')


def message(exception: BaseException) -> str:
    if isinstance(exception, RSocketProtocolError):
        return str(exception.data or '')
    return str(exception)


class StreamPrinter(Subscriber):
    """Prints `item <data>` per item, then `complete`, `error <message>` or
    `cancelled`; requests `batch` more each time it received `batch` items (the first
    `batch` are the request's initial request N)."""

    def __init__(self, batch: int, cancel_after: Optional[int], done: asyncio.Future):
        self._batch = batch
        self._cancel_after = cancel_after
        self._done = done
        self._received = 0
        self._in_batch = 0
        self._subscription: Optional[Subscription] = None

    def on_subscribe(self, subscription: Subscription):
        # rsocket-py calls this before it sends the request frame: nothing may be
        # requested here (the initial request N travels in the request frame).
        self._subscription = subscription

    def on_next(self, value: Payload, is_complete=False):
        if self._done.done():
            return
        say(f'item {text(value.data)}')
        self._received += 1
        self._in_batch += 1
        if self._cancel_after is not None and self._received >= self._cancel_after:
            if not is_complete:
                self._subscription.cancel()
            self._finish('cancelled')
        elif is_complete:
            self._finish('complete')
        elif self._in_batch == self._batch:
            self._in_batch = 0
            self._subscription.request(self._batch)

    def on_error(self, exception: Exception):
        self._finish(f'error {message(exception)}')

    def on_complete(self):
        self._finish('complete')

    def _finish(self, line: str):
        if not self._done.done():
            say(line)
            self._done.set_result(None)


class ListPublisher(Publisher, Subscription):
    """Emits `items` as requested, then completes."""

    def __init__(self, items: List[str]):
        self._items = list(items)
        self._subscriber: Optional[Subscriber] = None
        self._demand = 0
        self._finished = False

    def subscribe(self, subscriber: Subscriber):
        self._subscriber = subscriber
        subscriber.on_subscribe(self)

    def request(self, n: int):
        if n <= 0 or self._finished:
            return
        self._demand += n
        while self._items and self._demand > 0:
            self._demand -= 1
            self._subscriber.on_next(Payload(self._items.pop(0).encode()))
        if not self._items:
            self._finished = True
            self._subscriber.on_complete()

    def cancel(self):
        self._finished = True


async def response(client: RSocketClient, data: str):
    try:
        answer = await client.request_response(Payload(data.encode()))
    except Exception as exception:
        say(f'error {message(exception)}')
        return
    if answer.metadata:
        say(f'metadata {text(answer.metadata)}')
    say(f'response {text(answer.data)}')


async def fire_and_forget(client: RSocketClient, data: str):
    await client.fire_and_forget(Payload(data.encode()))
    say('sent')


async def stream(client: RSocketClient, data: str, batch: int, cancel_after: Optional[int]):
    done = asyncio.get_event_loop().create_future()
    printer = StreamPrinter(batch, cancel_after, done)
    requester = client.request_stream(Payload(data.encode()))
    requester.initial_request_n(batch)
    requester.subscribe(printer)
    if cancel_after == 0:
        printer._subscription.cancel()
        printer._finish('cancelled')
    await done


async def big(client: RSocketClient, n: int):
    await response(client, 'len:' + 'x' * (n - 4))


async def big_reply(client: RSocketClient, n: int):
    try:
        answer = await client.request_response(Payload(f'big:{n}'.encode()))
    except Exception as exception:
        say(f'error {message(exception)}')
        return
    data = bytes(answer.data or b'')
    say(f'len {len(data)}')
    pattern = bytes(range(251))
    expected = (pattern * (len(data) // 251 + 1))[:len(data)]
    say('pattern ok' if data == expected else 'pattern bad')


async def channel(client: RSocketClient, items: str):
    values = items.split(',')
    done = asyncio.get_event_loop().create_future()
    printer = StreamPrinter(0, None, done)
    publisher = ListPublisher(values[1:]) if len(values) > 1 else None
    requester = client.request_channel(Payload(values[0].encode()), publisher)
    requester.subscribe(printer)
    await done


async def run(port: int, scenario: str, args: List[str]):
    reader, writer = await asyncio.open_connection('127.0.0.1', port)
    transport = TransportTCP(reader, writer, read_buffer_size=FRAGMENT_SIZE)
    async with RSocketClient(single_transport_provider(transport),
                             data_encoding=WellKnownMimeTypes.TEXT_PLAIN,
                             metadata_encoding=WellKnownMimeTypes.TEXT_PLAIN,
                             keep_alive_period=timedelta(seconds=5),
                             max_lifetime_period=timedelta(seconds=30),
                             fragment_size_bytes=FRAGMENT_SIZE) as client:
        if scenario == 'response' and len(args) == 1:
            await response(client, args[0])
        elif scenario == 'fnf' and len(args) == 1:
            await fire_and_forget(client, args[0])
            # Give the frame a moment on the wire before the connection closes.
            await asyncio.sleep(0.1)
        elif scenario == 'stream' and len(args) in (2, 3):
            await stream(client, args[0], int(args[1]), int(args[2]) if len(args) == 3 else None)
        elif scenario == 'big' and len(args) == 1:
            await big(client, int(args[0]))
        elif scenario == 'bigreply' and len(args) == 1:
            await big_reply(client, int(args[0]))
        elif scenario == 'channel' and len(args) == 1:
            await channel(client, args[0])
        else:
            raise SystemExit(f'unknown scenario: {scenario} {args}')


async def main(port: int, scenario: str, args: List[str]) -> int:
    try:
        await asyncio.wait_for(run(port, scenario, args), OVERALL_TIMEOUT_SECONDS)
    except asyncio.TimeoutError:
        say('timeout')
        return 2
    return 0


if __name__ == '__main__':
    keep_next_flag_on_fragments()
    logging.basicConfig(level=logging.DEBUG if os.environ.get('RSOCKET_PY_DEBUG') else logging.ERROR,
                        stream=sys.stderr)
    if len(sys.argv) < 3:
        sys.exit('usage: client.py <port> <scenario> [args...]')

    def stuck(_signal, _frame):
        say('timeout')
        os._exit(2)

    # A last resort should the event loop itself be stuck past the overall timeout.
    signal.signal(signal.SIGALRM, stuck)
    signal.alarm(OVERALL_TIMEOUT_SECONDS + 5)
    code = asyncio.run(main(int(sys.argv[1]), sys.argv[2], sys.argv[3:]))
    sys.stdout.flush()
    sys.stderr.flush()
    # Leave at once, whatever rsocket-py may still have running.
    os._exit(code)
