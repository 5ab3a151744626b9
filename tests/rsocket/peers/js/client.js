'use strict';
// rsocket-js (0.0.x) client for weir's RSocket interop tests: runs one client scenario
// of tests/rsocket/peers/mod.rs against 127.0.0.1:<port> and prints one line per event.
//
// Usage: NODE_PATH=<install dir>/node_modules node client.js <port> <scenario> [args…]
//
//   response <data>                        request-response
//   fnf <data>                             fire-and-forget
//   stream <data> <batch> [<cancel-after>] request-stream, requesting in batches
//   big <n>                                request-response `len:` + (n - 4) × `x`
//   bigreply <n>                           request-response `big:<n>`
//   channel <a,b,c>                        request-channel
//
// Exits 0 once the scenario ended (after closing the connection); non-zero only when
// the client itself broke: bad arguments, no connection, or no end within 30 seconds
// (then it prints `timeout`).
//
// Where this differs from the contract of mod.rs, because of rsocket-js 0.0.27:
//
// * `big <n>`: rsocket-js 0.0.x cannot fragment what it sends, so the request goes out
//   as one REQUEST_RESPONSE frame of about n bytes instead of 65,536-byte fragments (a
//   frame may be up to 16 MiB - 1, the 24-bit length prefix of the TCP transport).
//   Fragmented answers are reassembled by rsocket-js (ReassemblyDuplexConnection).
// * `channel`: the items are sent as they are requested by the server (the first one
//   in the REQUEST_CHANNEL frame); the answers are requested all at once (2^31 - 1),
//   as the contract sets no batch for them. An empty item list cannot be sent by
//   rsocket-js (its REQUEST_CHANNEL carries the first item), so at least one is needed.

const {RSocketClient, BufferEncoders} = require('rsocket-core');
const RSocketTcpClient = require('rsocket-tcp-client').default;
const {Flowable} = require('rsocket-flowable');

const MAX_REQUEST_N = 0x7fffffff;

function usage(message) {
  console.error(`client.js: ${message}`);
  console.error('usage: node client.js <port> <scenario> [args…] (see the comment at the top)');
  process.exit(2);
}

function text(buffer) {
  return buffer == null ? '' : Buffer.from(buffer).toString('utf8');
}

function errorMessage(error) {
  // rsocket-js wraps an ERROR frame's message: `RSocket error 0x201 (APPLICATION_ERROR):
  // <message>. See error `source` property for details.`; the frame's own message is in
  // `source`.
  if (error && error.source && error.source.message != null) {
    return error.source.message;
  }
  return error && error.message != null ? error.message : String(error);
}

function count(value, name) {
  if (value === undefined || !/^[0-9]+$/.test(value)) {
    usage(`${name} must be a non-negative integer, got ${JSON.stringify(value)}`);
  }
  return Number.parseInt(value, 10);
}

const [portArg, scenario, ...args] = process.argv.slice(2);
const port = count(portArg, 'port');
if (scenario === undefined) {
  usage('missing scenario');
}

const overall = setTimeout(() => {
  console.log('timeout');
  process.exit(1);
}, 30000);

const transport = new RSocketTcpClient({host: '127.0.0.1', port}, BufferEncoders);
const client = new RSocketClient({
  setup: {
    keepAlive: 2000,
    lifetime: 20000,
    dataMimeType: 'application/octet-stream',
    metadataMimeType: 'application/octet-stream',
  },
  transport,
  errorHandler: error => console.error(`client.js: connection error: ${error.message}`),
});

let finished = false;

// Ends the scenario: closes the connection (flushing what was written: the socket is
// ended, then read until the server closed its side, or for at most two seconds), then
// exits 0. The close waits for the current callback to return, so that rsocket-js has
// finished its own bookkeeping of the stream (closing from inside the callback of a
// request-response answer makes rsocket-js report a spurious error to that stream).
function finish() {
  if (finished) {
    return;
  }
  finished = true;
  clearTimeout(overall);
  setImmediate(close);
}

function close() {
  const socket = transport._socket;
  client.close();
  const exit = () => process.exit(0);
  if (socket) {
    socket.on('error', () => {});
    socket.once('close', exit);
    socket.resume();
    setTimeout(exit, 2000);
  } else {
    exit();
  }
}

function print(line) {
  if (!finished) {
    console.log(line);
  }
}

function requestResponse(rsocket, data, onAnswer) {
  rsocket.requestResponse({data}).subscribe({
    onComplete: answer => {
      onAnswer(answer);
      finish();
    },
    onError: error => {
      print(`error ${errorMessage(error)}`);
      finish();
    },
  });
}

const scenarios = {
  response: (rsocket, [data]) => {
    if (data === undefined) {
      usage('response needs <data>');
    }
    requestResponse(rsocket, Buffer.from(data, 'utf8'), answer => {
      if (answer.metadata != null) {
        print(`metadata ${text(answer.metadata)}`);
      }
      print(`response ${text(answer.data)}`);
    });
  },

  fnf: (rsocket, [data]) => {
    if (data === undefined) {
      usage('fnf needs <data>');
    }
    rsocket.fireAndForget({data: Buffer.from(data, 'utf8')});
    print('sent');
    finish();
  },

  stream: (rsocket, [data, batchArg, cancelArg]) => {
    if (data === undefined) {
      usage('stream needs <data> <batch> [<cancel-after>]');
    }
    const batch = count(batchArg, 'batch');
    if (batch < 1) {
      usage('batch must be at least 1');
    }
    const cancelAfter = cancelArg === undefined ? null : count(cancelArg, 'cancel-after');
    let subscription = null;
    let received = 0;
    let inBatch = 0;
    rsocket.requestStream({data: Buffer.from(data, 'utf8')}).subscribe({
      onSubscribe: s => {
        subscription = s;
        if (cancelAfter === 0) {
          print('cancelled');
          finish();
          return;
        }
        subscription.request(batch);
      },
      onNext: item => {
        if (finished) {
          return;
        }
        print(`item ${text(item.data)}`);
        received++;
        inBatch++;
        if (cancelAfter !== null && received >= cancelAfter) {
          subscription.cancel();
          print('cancelled');
          finish();
          return;
        }
        if (inBatch === batch) {
          inBatch = 0;
          subscription.request(batch);
        }
      },
      onComplete: () => {
        print('complete');
        finish();
      },
      onError: error => {
        print(`error ${errorMessage(error)}`);
        finish();
      },
    });
  },

  big: (rsocket, [nArg]) => {
    const n = count(nArg, 'n');
    const data = Buffer.alloc(n, 'x');
    data.write('len:'.slice(0, n), 0, 'latin1');
    requestResponse(rsocket, data, answer => print(`response ${text(answer.data)}`));
  },

  bigreply: (rsocket, [nArg]) => {
    const n = count(nArg, 'n');
    requestResponse(rsocket, Buffer.from(`big:${n}`, 'utf8'), answer => {
      const data = answer.data == null ? Buffer.alloc(0) : Buffer.from(answer.data);
      print(`len ${data.length}`);
      let ok = data.length === n;
      for (let i = 0; ok && i < data.length; i++) {
        ok = data[i] === i % 251;
      }
      print(ok ? 'pattern ok' : 'pattern bad');
    });
  },

  channel: (rsocket, [list]) => {
    if (list === undefined) {
      usage('channel needs <a,b,c>');
    }
    const items = list.split(',').map(item => ({data: Buffer.from(item, 'utf8')}));
    rsocket.requestChannel(Flowable.just(...items)).subscribe({
      onSubscribe: subscription => subscription.request(MAX_REQUEST_N),
      onNext: item => print(`item ${text(item.data)}`),
      onComplete: () => {
        print('complete');
        finish();
      },
      onError: error => {
        print(`error ${errorMessage(error)}`);
        finish();
      },
    });
  },
};

const run = scenarios[scenario];
if (!run) {
  usage(`unknown scenario ${scenario}`);
}

client.connect().subscribe({
  onComplete: rsocket => run(rsocket, args),
  onError: error => {
    console.error(`client.js: cannot connect to 127.0.0.1:${port}: ${error.message}`);
    process.exit(1);
  },
});
