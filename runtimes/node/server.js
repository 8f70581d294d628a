'use strict';
// sless HTTP wrapper for Node.js functions (contract: runtimes/README.md).
// Node core modules only, so it runs on any node:20+ image without installing anything.
const http = require('node:http');
const net = require('node:net');
const path = require('node:path');
const fs = require('node:fs');
const querystring = require('node:querystring');
const { pipeline } = require('node:stream');
const { urlToHttpOptions } = require('node:url');

const HEALTH_PATH = '/healthz';
const DRAIN_LIMIT = 64 << 20; // bytes of an oversized body read and dropped

function envInt(key, def) {
  const raw = process.env[key];
  if (raw === undefined || raw === '') return def;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 0) {
    console.error(`${key}=${JSON.stringify(raw)}: want a non-negative integer`);
    process.exit(2);
  }
  return n;
}

const TIMEOUT = envInt('SLESS_TIMEOUT_SECONDS', 0);
const MAX_BODY = envInt('SLESS_MAX_BODY_BYTES', 6 << 20);
const SHUTDOWN_GRACE = envInt('SLESS_SHUTDOWN_SECONDS', 25);

// Connection handoff (sless dev only): the pool passes keep-alive client connections over
// Node's IPC channel; on them, requests under FN_PREFIX are answered here ("direct"), any
// other path is forwarded to the gateway.
const FN_PREFIX = process.env.SLESS_FN_PREFIX || '';
const GATEWAY_URL = process.env.SLESS_GATEWAY_URL || '';
const HANDED = Symbol('handed-off connection');
let directActive = 0; // direct invocations started and not yet answered
const BUSY_MS = 100; // how often a process with direct invocations in flight says so

// log queues one JSON line for stderr; the queue is written every LOG_FLUSH_MS or LOG_BATCH
// lines, and at exit. A write per warm invocation cost about a quarter of the wrapper's CPU
// per request (test/bench/buildkit-wrappers.sh).
const LOG_FLUSH_MS = 50;
const LOG_BATCH = 256;
let logLines = [];
function log(level, msg, fields) {
  queueLine(JSON.stringify({ time: isoNow(), level, msg, ...fields }));
}

// logInvocation is log('info', 'invocation', ...) for the hot path, built without an
// intermediate object.
function logInvocation(method, path, status, durationMs, traceparent, extra = '') {
  queueLine(`{"time":"${isoNow()}","level":"info","msg":"invocation","method":${JSON.stringify(method)},"path":${JSON.stringify(path)},"status":${status},"duration_ms":${durationMs},"traceparent":${JSON.stringify(traceparent)}${extra}}`);
}

// directFields are what the pool needs on a direct invocation's line to record a request the
// gateway never saw (start_us, duration_us) and to see the process busy (active).
function directFields(startPerf, active) {
  const startUs = Math.round((performance.timeOrigin + startPerf) * 1000);
  const durationUs = Math.round((performance.now() - startPerf) * 1000);
  return `,"direct":true,"start_us":${startUs},"duration_us":${durationUs},"active":${active}`;
}

function queueLine(line) {
  logLines.push(line);
  if (logLines.length >= LOG_BATCH) flushLogs();
  else if (logLines.length === 1) setTimeout(flushLogs, LOG_FLUSH_MS).unref();
}

// isoNow formats the current time once per millisecond.
let isoMs = 0;
let isoText = '';
function isoNow() {
  const now = Date.now();
  if (now !== isoMs) {
    isoMs = now;
    isoText = new Date(now).toISOString();
  }
  return isoText;
}

function flushLogs() {
  if (logLines.length === 0) return;
  process.stderr.write(logLines.join('\n') + '\n');
  logLines = [];
}
// Lines still buffered when the process exits (a crash included) are written synchronously.
process.on('exit', flushLogs);

function loadHandler() {
  const spec = process.env.SLESS_HANDLER || 'handler.handle';
  const dot = spec.lastIndexOf('.');
  if (dot <= 0) {
    console.error(`SLESS_HANDLER=${JSON.stringify(spec)}: want file.export, e.g. handler.handle`);
    process.exit(2);
  }
  const dir = process.env.SLESS_HANDLER_DIR || path.join(__dirname, '..', 'handler');
  const mod = require(path.resolve(dir, spec.slice(0, dot)));
  const fn = mod[spec.slice(dot + 1)];
  if (typeof fn !== 'function') {
    console.error(`SLESS_HANDLER=${JSON.stringify(spec)}: ${spec.slice(0, dot)} exports no function ${spec.slice(dot + 1)}`);
    process.exit(2);
  }
  return fn;
}

class TimeoutError extends Error {}

// invoke runs a job: it resolves with the handler's value; after TIMEOUT it rejects with
// TimeoutError and the handler's promise is abandoned (its eventual value is discarded).
function invoke(fn, event, request) {
  const run = new Promise((resolve) => resolve(fn(event, request)));
  if (TIMEOUT === 0) return run;
  let timer;
  const deadline = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new TimeoutError(`function timed out after ${TIMEOUT}s`)), TIMEOUT * 1000);
  });
  return Promise.race([run, deadline]).finally(() => clearTimeout(timer));
}

// Timed invocations in flight, swept by one shared timer: a setTimeout/clearTimeout pair per
// request cost more than the rest of the wrapper's work on a warm call. A 504 may come up to
// SWEEP_MS late.
const SWEEP_MS = 25;
const pending = new Set();
let sweeper;

function watch(entry) {
  pending.add(entry);
  if (sweeper !== undefined) return;
  sweeper = setInterval(() => {
    const now = Date.now();
    for (const e of pending) {
      if (now >= e.deadline) {
        pending.delete(e);
        e.expire();
      }
    }
    if (pending.size === 0) {
      clearInterval(sweeper);
      sweeper = undefined;
    }
  }, SWEEP_MS);
}

function decodeEvent(body) {
  if (body.length === 0) return {};
  const text = body.toString();
  let value;
  try {
    value = JSON.parse(text);
  } catch {
    return text.trim() === '' ? {} : { body: text };
  }
  return value !== null && typeof value === 'object' && !Array.isArray(value) ? value : { body: value };
}

function errorJSON(message) {
  return JSON.stringify({ error: message });
}

// encodeValue returns [status, content type, payload] for a handler's value.
function encodeValue(value) {
  if (typeof value === 'string') return [200, 'text/plain; charset=utf-8', value];
  try {
    return [200, 'application/json', JSON.stringify(value === undefined ? null : value)];
  } catch (err) {
    return [500, 'application/json', errorJSON(`result is not JSON-encodable: ${err.message}`)];
  }
}

function encodeError(err) {
  if (err instanceof TimeoutError) return [504, 'application/json', errorJSON(err.message)];
  console.error(err);
  return [500, 'application/json', errorJSON(err && err.message !== undefined ? String(err.message) : String(err))];
}

async function encode(promise) {
  try {
    return encodeValue(await promise);
  } catch (err) {
    return encodeError(err);
  }
}

// call runs the handler; a synchronous result is encoded without a promise round trip.
function call(fn, event, request) {
  try {
    const value = fn(event, request);
    return value !== null && typeof value === 'object' && typeof value.then === 'function' ? encode(value) : encodeValue(value);
  } catch (err) {
    return encodeError(err);
  }
}

// headerValue reads one header from rawHeaders: touching req.headers makes Node build the
// whole header object, a measurable share of a warm call.
function headerValue(req, lowerName) {
  const raw = req.rawHeaders;
  for (let i = 0; i < raw.length; i += 2) {
    if (raw[i].length === lowerName.length && raw[i].toLowerCase() === lowerName) return raw[i + 1];
  }
  return '';
}

// readBody calls done(err, body) once: with the whole body, or with an error (tooLarge set
// when the body exceeds MAX_BODY). Callbacks rather than promises: this is the hot path.
function readBody(req, done) {
  const chunks = [];
  let size = 0;
  let finished = false;
  const finish = (err, body) => {
    if (!finished) {
      finished = true;
      done(err, body);
    }
  };
  req.on('data', (chunk) => {
    size += chunk.length;
    if (size > MAX_BODY) {
      req.pause();
      finish(tooLarge());
      return;
    }
    chunks.push(chunk);
  });
  req.on('end', () => finish(null, chunks.length === 1 ? chunks[0] : Buffer.concat(chunks)));
  req.on('error', finish);
}

function tooLarge() {
  return Object.assign(new Error('too large'), { tooLarge: true });
}

// discardBody reads (a bounded amount of) an oversized body so the client, still sending,
// gets the 413 instead of a broken pipe; beyond DRAIN_LIMIT the connection is dropped.
function discardBody(req) {
  let drained = 0;
  req.removeAllListeners('data');
  req.on('data', (chunk) => {
    drained += chunk.length;
    if (drained > DRAIN_LIMIT) req.socket.destroy();
  });
  req.resume();
}

// directPath returns the path a direct invocation's handler sees (the raw path with FN_PREFIX
// stripped), or undefined when the path is not under FN_PREFIX.
function directPath(raw) {
  if (!raw.startsWith(FN_PREFIX)) return undefined;
  if (raw.length === FN_PREFIX.length) return '/';
  return raw.charCodeAt(FN_PREFIX.length) === 0x2f /* / */ ? raw.slice(FN_PREFIX.length) : undefined;
}

// forwardedHeaders returns req.headers with the X-Forwarded-* the gateway would have set,
// replacing the client's.
function forwardedHeaders(req) {
  const headers = req.headers;
  const ip = req.socket.remoteAddress || '';
  // Go (the gateway) prints an IPv4-mapped IPv6 peer as plain IPv4.
  headers['x-forwarded-for'] = ip.startsWith('::ffff:') && ip.includes('.') ? ip.slice(7) : ip;
  headers['x-forwarded-host'] = headers.host || '';
  headers['x-forwarded-proto'] = 'http';
  return headers;
}

// Hop-by-hop headers describe one connection; the proxy drops them in both directions.
const HOP_BY_HOP = new Set(['connection', 'keep-alive', 'proxy-connection', 'te', 'trailer', 'transfer-encoding', 'upgrade']);

// endToEnd copies raw headers (name, value, ...) without the hop-by-hop ones, keeping
// duplicates, order and case.
function endToEnd(raw) {
  const headers = [];
  for (let i = 0; i < raw.length; i += 2) {
    if (!HOP_BY_HOP.has(raw[i].toLowerCase())) headers.push(raw[i], raw[i + 1]);
  }
  return headers;
}

// proxy forwards a request on a handed-off connection that is not for this function to the
// gateway, streaming the bodies both ways.
function proxy(gateway, req, res) {
  const headers = endToEnd(req.rawHeaders);
  // A chunked body is re-chunked on the new hop whatever the method (Node would not for GET).
  if (headerValue(req, 'transfer-encoding') !== '') headers.push('Transfer-Encoding', 'chunked');
  // The gateway must not hand this connection, the wrapper's own, to a function.
  headers.push('X-Sless-No-Handoff', '1');
  const out = http.request({ ...gateway.target, method: req.method, path: req.url, headers, agent: gateway.agent });
  out.on('response', (up) => {
    res.writeHead(up.statusCode, up.statusMessage, endToEnd(up.rawHeaders));
    // A streamed response (server-sent events) shows its headers before its first chunk.
    if (up.headers['content-length'] === undefined) res.flushHeaders();
    // pipeline, not pipe: a gateway connection lost mid-body, or a client gone, ends both sides.
    pipeline(up, res, () => {});
  });
  out.on('error', (err) => {
    // The rest of the request body has no taker now; reading it keeps the connection usable.
    discardBody(req);
    if (res.writableEnded || res.destroyed) return; // answered already, or the client is gone
    if (res.headersSent) {
      res.destroy(); // cut off mid-response: the client must notice
      return;
    }
    log('error', 'forwarding to the gateway failed', { method: req.method, path: req.url, error: err.message });
    const payload = errorJSON(`gateway unreachable: ${err.message}`);
    res.writeHead(502, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(payload) }).end(payload);
  });
  res.on('close', () => out.destroy()); // a no-op once the exchange completed
  req.pipe(out);
}

// handoffGateway returns where proxy sends requests when handoff is on, else undefined.
function handoffGateway() {
  if (!process.channel || FN_PREFIX === '' || GATEWAY_URL === '') return undefined;
  let target;
  try {
    target = urlToHttpOptions(new URL(GATEWAY_URL));
  } catch {
    target = {};
  }
  if (target.protocol !== 'http:') {
    log('error', 'connection handoff off: SLESS_GATEWAY_URL is not an http:// URL', { url: GATEWAY_URL });
    return undefined;
  }
  return { target, agent: new http.Agent({ keepAlive: true }) };
}

function serve(fn) {
  let inFlight = 0;
  const wantsRequest = fn.length >= 2;
  const gateway = handoffGateway();
  let closing = false;
  const server = http.createServer((req, res) => {
    const q = req.url.indexOf('?');
    let pathname = q < 0 ? req.url : req.url.slice(0, q);
    // directStart (performance.now()) marks a direct invocation on a handed-off connection.
    let directStart;
    if (req.socket[HANDED] === true) {
      pathname = directPath(pathname);
      if (pathname === undefined) {
        inFlight++; // SIGTERM waits for a forwarded request too (up to the grace)
        res.on('close', () => inFlight--);
        proxy(gateway, req, res);
        return;
      }
      directStart = performance.now();
    }
    if (pathname === HEALTH_PATH && req.method === 'GET') {
      res.writeHead(200, { 'Content-Type': 'application/json' }).end('{"status":"ok"}');
      return;
    }
    if (directStart !== undefined) directActive++;
    const start = Date.now();
    const traceparent = headerValue(req, 'traceparent');
    const answer = (status, ctype, payload) => {
      res.writeHead(status, { 'Content-Type': ctype, 'Content-Length': Buffer.byteLength(payload) }).end(payload);
      logInvocation(req.method, pathname, status, Date.now() - start, traceparent,
        directStart === undefined ? '' : directFields(directStart, --directActive));
    };
    const fail = (err) => {
      if (err.tooLarge) {
        answer(413, 'application/json', errorJSON(`request body exceeds ${MAX_BODY} bytes`));
        discardBody(req);
      } else {
        res.setHeader('Connection', 'close');
        answer(400, 'application/json', errorJSON(`reading request body: ${err.message}`));
      }
    };
    inFlight++; // until the response is flushed: SIGTERM waits for it
    res.on('close', () => inFlight--);
    if (Number(headerValue(req, 'content-length')) > MAX_BODY) {
      fail(tooLarge());
      return;
    }
    readBody(req, (err, body) => {
      if (err) {
        fail(err);
        return;
      }
      const request = wantsRequest
        ? { method: req.method, path: pathname, query: q < 0 ? {} : { ...querystring.parse(req.url.slice(q + 1)) }, headers: directStart === undefined ? req.headers : forwardedHeaders(req), traceparent }
        : undefined;
      // The watchdog answers 504 itself; the handler's promise is abandoned, its value dropped.
      let watched;
      if (TIMEOUT > 0) {
        watched = {
          deadline: start + TIMEOUT * 1000,
          expired: false,
          expire() {
            this.expired = true;
            answer(504, 'application/json', errorJSON(`function timed out after ${TIMEOUT}s`));
          },
        };
        watch(watched);
      }
      const finish = (result) => {
        if (TIMEOUT > 0) {
          if (watched.expired) return;
          pending.delete(watched);
          // A synchronous handler blocks the timer: it still gets its 504, only late.
          if (Date.now() - start > TIMEOUT * 1000) result = encodeError(new TimeoutError(`function timed out after ${TIMEOUT}s`));
        }
        answer(...result);
      };
      const result = call(fn, decodeEvent(body), request);
      if (result instanceof Promise) result.then(finish);
      else finish(result);
    });
  });
  // adopt serves a connection handed off by the pool (a NODE_HANDLE message, acked by Node).
  const adopt = (msg, socket) => {
    if (msg === null || typeof msg !== 'object' || msg.sless !== 'conn' || !(socket instanceof net.Socket)) return;
    socket[HANDED] = true;
    socket.on('close', () => log('info', 'direct connection closed', { direct: true, active: directActive }));
    if (closing) {
      socket.destroy(); // the client reconnects, to the gateway
      return;
    }
    // What net.Server does for the connections it accepts itself.
    socket.allowHalfOpen = true;
    socket.setNoDelay(true);
    server.emit('connection', socket);
    // The server's parser reads the handle in C++ (parser.consume); a 'data' event is its entry
    // for other bytes (parser.execute), parsed here and now, before the handle's first read
    // completes on a later event loop turn.
    if (typeof msg.prefix === 'string' && msg.prefix !== '') socket.emit('data', Buffer.from(msg.prefix, 'base64'));
  };
  const host = process.env.SLESS_HOST || '127.0.0.1';
  server.listen(envInt('PORT', 8080), host, () => {
    log('info', 'function listening', { addr: `${host}:${server.address().port}`, timeout_seconds: TIMEOUT });
    // Only now: the server tracks connections (idle ones closed at shutdown) once listening.
    if (gateway !== undefined) {
      process.on('message', adopt);
      // The listener refs the channel; the server alone must keep the process alive.
      process.channel.unref();
      // The pool must not take a process answering a long direct invocation for idle.
      setInterval(() => {
        if (directActive > 0) log('info', 'direct busy', { direct: true, active: directActive });
      }, BUSY_MS).unref();
    }
  });
  const shutdown = (signal) => {
    log('info', 'shutting down', { signal });
    closing = true;
    server.close();
    server.closeIdleConnections();
    const deadline = Date.now() + SHUTDOWN_GRACE * 1000;
    const poll = setInterval(() => {
      if (inFlight === 0 || Date.now() >= deadline) {
        flushLogs();
        process.exit(0);
      }
    }, 20);
    poll.unref();
  };
  process.on('SIGTERM', shutdown);
  process.on('SIGINT', shutdown);
}

function writeTerminationLog(payload) {
  const explicit = Boolean(process.env.SLESS_TERMINATION_LOG);
  const file = process.env.SLESS_TERMINATION_LOG || '/dev/termination-log';
  // Kubernetes creates the default file; never create it outside a pod.
  if (!explicit && !fs.existsSync(file)) return;
  try {
    fs.writeFileSync(file, Buffer.from(payload).subarray(0, 4096));
  } catch (err) {
    if (explicit) log('error', 'writing the termination message', { path: file, error: err.message });
  }
}

async function runJob(fn) {
  const body = process.env.SLESS_EVENT !== undefined ? Buffer.from(process.env.SLESS_EVENT) : fs.readFileSync(0);
  const traceparent = process.env.TRACEPARENT || '';
  let status, payload;
  if (body.length > MAX_BODY) {
    [status, payload] = [500, errorJSON(`job event exceeds ${MAX_BODY} bytes`)];
  } else {
    [status, , payload] = await encode(invoke(fn, decodeEvent(body), { mode: 'job', traceparent }));
  }
  const code = status === 200 ? 0 : 1;
  writeTerminationLog(payload);
  log('info', 'job finished', { exit_code: code, traceparent });
  flushLogs();
  // exit only after stdout drained; abandoned timers of a timed-out handler must not keep the job alive
  process.stdout.write(payload + '\n', () => process.exit(code));
}

const fn = loadHandler();
if (process.env.SLESS_MODE === 'job') {
  runJob(fn);
} else {
  serve(fn);
}
