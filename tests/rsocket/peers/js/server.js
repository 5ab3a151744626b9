'use strict';
// rsocket-js (0.0.x) server for weir's RSocket interop tests: answers the "interop
// service" described in tests/rsocket/peers/mod.rs, binds 127.0.0.1 on a free port,
// prints `port <n>` once it listens and runs until killed.
//
// Usage: NODE_PATH=<install dir>/node_modules node server.js
//
// Where this differs from the contract of mod.rs, because of rsocket-js 0.0.27:
//
// * No fragmentation of what it sends: rsocket-js 0.0.x reassembles fragments it
//   receives (ReassemblyDuplexConnection) but never fragments outgoing frames, so the
//   "fragment size 65,536" cannot be set; every payload goes out as one frame (a frame
//   may be up to 16 MiB - 1, the 24-bit length prefix of the TCP transport).
//
// Two bugs of rsocket-js 0.0.27 are fixed below (patching the connection class its
// RSocket machine talks to), as they would break the contract rather than test weir:
//
// * Responses with metadata: its responder never sets the METADATA flag on the PAYLOAD
//   frames it sends, so their metadata is silently dropped (fixed upstream only in
//   0.0.29-alpha.0, which sets the flag when the metadata is non-null, as done here).
//   So `echo:` does echo the request's metadata. A request with empty (zero-length)
//   metadata is seen by rsocket-js as having none, so its answer has no metadata.
// * A REQUEST_CHANNEL frame with the COMPLETE flag (the requester sends one item and
//   completes at once): rsocket-js ignores that flag, so the channel would never
//   complete (not fixed upstream, even in 0.0.29-alpha.0). It is handed to rsocket-js
//   as the REQUEST_CHANNEL without the flag followed by a PAYLOAD frame with COMPLETE.
//
// Everything else is rsocket-js's own behaviour: request-stream honours REQUEST_N (the
// stream below emits only what was requested), request-channel answers each incoming
// item in upper case and completes when the incoming stream completes.

const net = require('net');
const {
  RSocketServer,
  BufferEncoders,
  FRAME_TYPES,
  FLAGS,
} = require('rsocket-core');
const {ReassemblyDuplexConnection} = require('rsocket-core/build/ReassemblyDuplexConnection');
const RSocketTCPServer = require('rsocket-tcp-server').default;
const {Flowable, Single} = require('rsocket-flowable');

// Fire-and-forget requests received so far, on any connection.
let fnfCount = 0;

// request-stream: at most this many items are emitted in one go before yielding to
// the event loop, and emission pauses while more than this many bytes wait in the
// socket's write buffer (so a huge REQUEST_N on `infinite` never buffers unboundedly).
const CHUNK = 256;
const HIGH_WATER = 1 << 16;

function text(buffer) {
  return buffer == null ? '' : Buffer.from(buffer).toString('utf8');
}

function payload(string) {
  return {data: Buffer.from(string, 'utf8')};
}

// The net.Socket under a server-side RSocket (rsocket-js has no public accessor; the
// machine's connection is a ReassemblyDuplexConnection around the TCP connection).
// Only used for write-buffer backpressure; `null` when it cannot be found.
function socketOf(rsocket) {
  try {
    const socket = rsocket._connection._source._socket;
    return socket && typeof socket.writableLength === 'number' ? socket : null;
  } catch (error) {
    return null;
  }
}

function requestResponse(rsocket, request) {
  const data = request.data == null ? Buffer.alloc(0) : Buffer.from(request.data);
  const string = data.toString('utf8');
  if (string.startsWith('echo:')) {
    const answer = payload(string.slice('echo:'.length));
    if (request.metadata != null) {
      answer.metadata = request.metadata;
    }
    return Single.of(answer);
  }
  if (string.startsWith('fail:')) {
    return Single.error(new Error(string.slice('fail:'.length)));
  }
  if (string.startsWith('big:')) {
    const n = Number.parseInt(string.slice('big:'.length), 10);
    if (!(n >= 0)) {
      return Single.error(new Error(`bad size in ${string}`));
    }
    const bytes = Buffer.alloc(n);
    for (let i = 0; i < n; i++) {
      bytes[i] = i % 251;
    }
    return Single.of({data: bytes});
  }
  if (string.startsWith('len:')) {
    let sum = 0;
    for (let i = 0; i < data.length; i++) {
      sum = (sum + data[i]) % 4294967296;
    }
    return Single.of(payload(`${data.length}:${sum}`));
  }
  if (string === 'fnf-count') {
    return Single.of(payload(String(fnfCount)));
  }
  return Single.error(new Error(`unknown request ${string}`));
}

// Items `0`, `1`, … while requested: complete before item `limit`, fail with `stream
// failed` before item `failAt` (either may be `Infinity`).
function counter(rsocket, limit, failAt) {
  return new Flowable(subscriber => {
    let next = 0;
    let pending = 0;
    let done = false;
    let emitting = false;
    let waiting = false;
    const resume = () => {
      waiting = false;
      drain();
    };
    const drain = () => {
      if (emitting || waiting || done) {
        return;
      }
      emitting = true;
      try {
        let budget = CHUNK;
        while (!done) {
          if (next >= failAt) {
            done = true;
            subscriber.onError(new Error('stream failed'));
            break;
          }
          if (next >= limit) {
            done = true;
            subscriber.onComplete();
            break;
          }
          if (pending === 0) {
            break;
          }
          const socket = socketOf(rsocket);
          if (socket && socket.writableLength > HIGH_WATER) {
            waiting = true;
            socket.once('drain', resume);
            break;
          }
          if (budget === 0) {
            waiting = true;
            setImmediate(resume);
            break;
          }
          budget--;
          pending--;
          subscriber.onNext(payload(String(next++)));
        }
      } finally {
        emitting = false;
      }
    };
    subscriber.onSubscribe({
      cancel: () => {
        done = true;
      },
      request: n => {
        pending = Math.min(pending + n, Number.MAX_SAFE_INTEGER);
        drain();
      },
    });
  });
}

function requestStream(rsocket, request) {
  const string = text(request.data);
  if (string === 'infinite') {
    return counter(rsocket, Infinity, Infinity);
  }
  if (string.startsWith('fail-after:')) {
    const k = Number.parseInt(string.slice('fail-after:'.length), 10);
    if (k >= 0) {
      return counter(rsocket, Infinity, k);
    }
  } else if (/^[0-9]+$/.test(string)) {
    return counter(rsocket, Number.parseInt(string, 10), Infinity);
  }
  return Flowable.error(new Error(`unknown stream ${string}`));
}

function requestChannel(payloads) {
  return payloads.map(item => payload(text(item.data).toUpperCase()));
}

// The fixes described at the top, on the connection the RSocket machine talks to
// (after reassembly of what it receives, before encoding of what it sends).
const sendOne = ReassemblyDuplexConnection.prototype.sendOne;
ReassemblyDuplexConnection.prototype.sendOne = function (frame) {
  if (frame.type === FRAME_TYPES.PAYLOAD && frame.metadata != null) {
    frame = Object.assign({}, frame, {flags: frame.flags | FLAGS.METADATA});
  }
  sendOne.call(this, frame);
};
const receive = ReassemblyDuplexConnection.prototype.receive;
ReassemblyDuplexConnection.prototype.receive = function () {
  return receive.call(this).lift(subscriber => ({
    onSubscribe: subscription => subscriber.onSubscribe(subscription),
    onNext: frame => {
      if (frame.type !== FRAME_TYPES.REQUEST_CHANNEL || !(frame.flags & FLAGS.COMPLETE)) {
        subscriber.onNext(frame);
        return;
      }
      subscriber.onNext(Object.assign({}, frame, {flags: frame.flags & ~FLAGS.COMPLETE}));
      subscriber.onNext({
        data: null,
        flags: FLAGS.COMPLETE,
        metadata: null,
        streamId: frame.streamId,
        type: FRAME_TYPES.PAYLOAD,
      });
    },
    onComplete: () => subscriber.onComplete(),
    onError: error => subscriber.onError(error),
  }));
};

// The TCP transport on 127.0.0.1, port 0, printing the port it listens on.
function transport() {
  return new RSocketTCPServer(
    {
      host: '127.0.0.1',
      port: 0,
      serverFactory: onConnect => {
        const server = net.createServer(socket => {
          // rsocket-js removes every listener of a socket it closes, after which a
          // late `error` (ECONNRESET, EPIPE) would crash the process: keep one.
          const removeAll = socket.removeAllListeners;
          socket.removeAllListeners = function (...args) {
            const result = removeAll.apply(this, args);
            this.on('error', () => {});
            return result;
          };
          onConnect(socket);
        });
        server.on('listening', () => {
          console.log(`port ${server.address().port}`);
        });
        server.on('error', error => {
          console.error('rsocket-js server:', error);
          process.exit(1);
        });
        return server;
      },
    },
    BufferEncoders,
  );
}

const server = new RSocketServer({
  getRequestHandler: rsocket => ({
    fireAndForget: () => {
      fnfCount++;
    },
    requestResponse: request => requestResponse(rsocket, request),
    requestStream: request => requestStream(rsocket, request),
    requestChannel: payloads => requestChannel(payloads),
  }),
  transport: transport(),
  errorHandler: error => console.error('rsocket-js server connection error:', error.message),
});
server.start();
