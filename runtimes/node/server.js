'use strict';
// sless HTTP wrapper for Node.js functions (contract: runtimes/README.md).
// Node core modules only, so it runs on any node:20+ image without installing anything.
const http = require('node:http');
const net = require('node:net');
const path = require('node:path');
const fs = require('node:fs');
const identity = require('./sless_identity.js'); // the verifier of signed calls

const HEALTH_PATH = '/healthz';
const MAX_HEALTH_HOLD_MS = 2000; // the cap of ?hold_ms on the health path

// healthHold is how long a health request asks to be held (?hold_ms, at most
// MAX_HEALTH_HOLD_MS): a scheduled pre-warm keeps one in flight at all times, so a function
// scaled on concurrency, a point-in-time count, is seen busy until its tick.
function healthHold(query) {
  const ms = Number(new URLSearchParams(query).get('hold_ms'));
  return Number.isFinite(ms) && ms > 0 ? Math.min(ms, MAX_HEALTH_HOLD_MS) : 0;
}
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
// The body must arrive within the function's timeout, or the longest one a function may set
// (rules.MaxTimeoutSeconds; runtimes/contract_test.go holds them equal) when it has none.
const MAX_BODY_SECONDS = 900;
const BODY_SECONDS = TIMEOUT || MAX_BODY_SECONDS;
const MAX_BODY = envInt('SLESS_MAX_BODY_BYTES', 6 << 20);
const SHUTDOWN_GRACE = envInt('SLESS_SHUTDOWN_SECONDS', 25);
// Read (and taken out of the environment) before the handler is loaded.
const IDENTITY_KEY = identity.loadKey();
// The drain closes idle keep-alive connections only once no request has come for this long:
// a caller (the interceptor's pool, pinned to this pod through the Service) may be sending
// on one at that instant, and a POST whose connection closed under it is not retried.
const DRAIN_QUIET_MS = 1000;

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
function logInvocation(method, path, status, durationMs, traceparent) {
  queueLine(`{"time":"${isoNow()}","level":"info","msg":"invocation","method":${JSON.stringify(method)},"path":${JSON.stringify(path)},"status":${status},"duration_ms":${durationMs},"traceparent":${JSON.stringify(traceparent)}}`);
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

// isStream reports a result streamed one chunk per item (runtimes/README.md, "Streamed
// responses"): an async iterable (an async generator, a Node Readable), a web ReadableStream
// or a generator object (not an array, a string or a Buffer, which have no next()).
function isStream(v) {
  if (v === null || typeof v !== 'object') return false;
  if (typeof v[Symbol.asyncIterator] === 'function' || typeof v.getReader === 'function') return true;
  return typeof v.next === 'function' && typeof v[Symbol.iterator] === 'function';
}

// iteratorOf returns an async iterator over a stream's items.
function iteratorOf(v) {
  if (typeof v[Symbol.asyncIterator] === 'function') return v[Symbol.asyncIterator]();
  if (typeof v.getReader === 'function') {
    const reader = v.getReader();
    return { next: () => reader.read(), return: async () => { await reader.cancel(); return { done: true }; } };
  }
  return v; // a generator: next() answers synchronously and await takes that too
}

const SSE_FIELDS = new Set(['event', 'id', 'retry', 'data']);

// streamChunk is what one streamed item is sent as: bytes as given; in a text/event-stream a
// string is one event's data and an object of event/id/retry/data one whole event; otherwise a
// string as given and any other value as a line of JSON.
function streamChunk(item, sse) {
  if (item instanceof Uint8Array) return item;
  if (sse) {
    const keys = item !== null && typeof item === 'object' && !Array.isArray(item) ? Object.keys(item) : [];
    const fields = keys.length > 0 && keys.every((k) => SSE_FIELDS.has(k)) ? item : { data: item };
    const lines = [];
    for (const name of ['event', 'id', 'retry']) {
      if (fields[name] !== undefined && fields[name] !== null) lines.push(`${name}: ${fields[name]}`);
    }
    const data = typeof fields.data === 'string' ? fields.data : JSON.stringify(fields.data === undefined ? null : fields.data);
    for (const line of data.split('\n')) lines.push(`data: ${line}`);
    return lines.join('\n') + '\n\n';
  }
  if (typeof item === 'string') return item;
  return JSON.stringify(item === undefined ? null : item) + '\n';
}

// drainStream joins a stream's chunks into one text: job mode and triggers take the whole.
async function drainStream(v) {
  const it = iteratorOf(v);
  const parts = [];
  for (;;) {
    const { value, done } = await it.next();
    if (done) return Buffer.concat(parts).toString('utf8');
    parts.push(Buffer.from(streamChunk(value, false)));
  }
}

// invoke runs a job: it resolves with the handler's value; after TIMEOUT it rejects with
// TimeoutError and the handler's promise is abandoned (its eventual value is discarded).
function invoke(fn, event, request) {
  const run = new Promise((resolve) => resolve(fn(event, request))).then((v) => (isStream(v) ? drainStream(v) : v));
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

// A result that is an object with an integer statusCode is a response object
// (runtimes/README.md); the HTTP path sends it as the handler describes.
const RESPONSE_KEYS = ['body', 'headers', 'isBase64Encoded', 'multiValueHeaders', 'statusCode'];
// Set by the wrapper or the platform; a handler's values for them are dropped.
const DROPPED_HEADERS = new Set(['connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'upgrade', 'te', 'trailer', 'content-length']);
const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
const BAD_VALUE = /[\r\n\0]/;
const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

function isResponse(value) {
  return value !== null && typeof value === 'object' && !Array.isArray(value) && Number.isInteger(value.statusCode);
}

function headerValue1(name, v) {
  if (typeof v === 'number' || typeof v === 'boolean') v = String(v);
  if (typeof v !== 'string') throw new Error(`header ${name}: want a string, got ${v === null ? 'null' : typeof v}`);
  if (BAD_VALUE.test(v)) throw new Error(`header ${name}: a value may not contain CR, LF or NUL`);
  return v;
}

// responseOf returns [status, headers (lowercase name → [name, values]), payload] or throws
// what is wrong with the object.
function responseOf(value) {
  const unknown = Object.keys(value).filter((k) => !RESPONSE_KEYS.includes(k)).sort();
  if (unknown.length > 0) throw new Error(`unknown key '${unknown[0]}'; a response object has ${RESPONSE_KEYS.join(', ')}`);
  const status = value.statusCode;
  if (status < 100 || status > 599) throw new Error(`statusCode ${status} is not in 100-599`);
  const headers = new Map();
  for (const field of ['headers', 'multiValueHeaders']) {
    const given = value[field] ?? {};
    if (typeof given !== 'object' || Array.isArray(given)) throw new Error(`${field}: want an object of header names`);
    for (const [name, v] of Object.entries(given)) {
      if (!TOKEN.test(name)) throw new Error(`${field}: '${name}' is not a valid header name`);
      const lower = name.toLowerCase();
      if (DROPPED_HEADERS.has(lower) || lower.startsWith('x-sless-')) continue;
      const values = (Array.isArray(v) ? v : [v]).map((one) => headerValue1(name, one));
      const entry = headers.get(lower) || [name, []];
      entry[1].push(...values);
      headers.set(lower, entry);
    }
  }
  let payload;
  let ctype = 'text/plain; charset=utf-8';
  const body = value.body;
  if (value.isBase64Encoded) {
    if (typeof body !== 'string' || !BASE64.test(body)) throw new Error('isBase64Encoded needs the body as a valid base64 string');
    payload = Buffer.from(body, 'base64');
    ctype = 'application/octet-stream';
  } else if (body === undefined || body === null) {
    payload = '';
  } else if (typeof body === 'string') {
    payload = body;
  } else {
    payload = JSON.stringify(body);
    ctype = 'application/json';
  }
  if (!headers.has('content-type')) headers.set('content-type', ['Content-Type', [ctype]]);
  return [status, null, payload, headers];
}

// httpValue is encodeValue for an HTTP answer: response objects are taken apart.
function httpValue(value) {
  if (!isResponse(value)) return encodeValue(value);
  try {
    return responseOf(value);
  } catch (err) {
    return [500, 'application/json', errorJSON(`invalid response object: ${err.message}`)];
  }
}

async function encodeHTTP(promise) {
  try {
    const value = await promise;
    return isStream(value) ? { stream: value } : httpValue(value);
  } catch (err) {
    return encodeError(err);
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

// call runs the handler for an HTTP request; a synchronous result is encoded without a promise round trip.
function call(fn, event, request) {
  try {
    const value = fn(event, request);
    if (isStream(value)) return { stream: value };
    return value !== null && typeof value === 'object' && typeof value.then === 'function' ? encodeHTTP(value) : httpValue(value);
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

// requestInfo is the handler's second argument: metadata and the raw body (base64 when it is
// not UTF-8).
// Headers come from rawHeaders, as sent: req.headers drops repeats of some names
// (User-Agent, Content-Type, …).
function requestInfo(req, reqPath, q, body, traceparent) {
  const multi = {};
  for (let i = 0; i < req.rawHeaders.length; i += 2) {
    const name = req.rawHeaders[i].toLowerCase();
    (multi[name] ||= []).push(req.rawHeaders[i + 1]);
  }
  const headers = {};
  for (const [name, values] of Object.entries(multi)) headers[name] = values.join(', ');
  const query = {};
  const multiQuery = {};
  if (q >= 0) {
    for (const [name, value] of new URLSearchParams(req.url.slice(q + 1))) {
      if (!(name in multiQuery)) query[name] = value;
      (multiQuery[name] ||= []).push(value);
    }
  }
  const text = body.toString('utf8');
  const binary = !Buffer.from(text, 'utf8').equals(body);
  return {
    method: req.method, path: reqPath, query, multiValueQuery: multiQuery,
    headers, multiValueHeaders: multi, traceparent,
    body: binary ? body.toString('base64') : text, isBase64Encoded: binary,
  };
}

// decodePath percent-decodes a request path as Go's net/http does (bytes read as UTF-8, an
// invalid sequence as U+FFFD); null when an escape is malformed.
function decodePath(raw) {
  if (!raw.includes('%')) return raw;
  if (/%(?![0-9A-Fa-f]{2})/.test(raw)) return null;
  return Buffer.from(raw.replace(/%([0-9A-Fa-f]{2})/g, (_, hex) => String.fromCharCode(parseInt(hex, 16))), 'latin1').toString('utf8');
}

// readBody calls done(err, body) once: with the whole body, or with an error (tooLarge set
// when the body exceeds MAX_BODY, timedOut when it has not arrived within BODY_SECONDS,
// however often bytes trickle in). Callbacks rather than promises: this is the hot path.
function readBody(req, done) {
  const chunks = [];
  let size = 0;
  let finished = false;
  const finish = (err, body) => {
    if (!finished) {
      finished = true;
      clearTimeout(timer);
      done(err, body);
    }
  };
  const timer = setTimeout(() => {
    req.pause();
    finish(Object.assign(new Error('too slow'), { timedOut: true }));
  }, BODY_SECONDS * 1000);
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

// serve listens first and loads the handler after: a readiness probe that arrives while the
// handler's modules load waits in the backlog and is answered once they have, instead of being
// refused and retried a probe period later (most of a cold start).
function serve(load) {
  let inFlight = 0;
  let draining = false; // after SIGTERM every response ends its connection
  let lastRequest = 0; // when a request last arrived (ms)
  let fn;
  let wantsRequest = false;
  const server = http.createServer((req, res) => {
    lastRequest = Date.now();
    if (draining) res.setHeader('Connection', 'close'); // health checks answer at once
    const q = req.url.indexOf('?');
    const pathname = q < 0 ? req.url : req.url.slice(0, q);
    if (pathname === HEALTH_PATH && req.method === 'GET') {
      const ok = () => res.writeHead(200, { 'Content-Type': 'application/json' }).end('{"status":"ok"}');
      const hold = draining ? 0 : healthHold(q < 0 ? '' : req.url.slice(q + 1));
      if (hold > 0) setTimeout(ok, hold);
      else ok();
      return;
    }
    const start = Date.now();
    const traceparent = headerValue(req, 'traceparent');
    const refused = identity.refusal(IDENTITY_KEY, req.method, req.url, req.rawHeaders, start / 1000);
    if (refused !== null) {
      const payload = errorJSON(refused.message);
      // Its body is never read: the connection ends with the answer.
      res.writeHead(refused.status, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(payload), Connection: 'close' }).end(payload);
      logInvocation(req.method, pathname, refused.status, 0, traceparent);
      return;
    }
    const answer = (status, ctype, payload, headers) => {
      if (draining) res.setHeader('Connection', 'close'); // SIGTERM came while it ran
      if (headers === undefined) {
        res.writeHead(status, { 'Content-Type': ctype, 'Content-Length': Buffer.byteLength(payload) }).end(payload);
      } else {
        for (const [name, values] of headers.values()) res.setHeader(name, values.length === 1 ? values[0] : values);
        const noBody = status < 200 || status === 204 || status === 304;
        if (!noBody) res.setHeader('Content-Length', Buffer.byteLength(payload));
        res.writeHead(status).end(noBody ? undefined : payload);
      }
      logInvocation(req.method, pathname, status, Date.now() - start, traceparent);
    };
    const fail = (err) => {
      if (err.tooLarge) {
        answer(413, 'application/json', errorJSON(`request body exceeds ${MAX_BODY} bytes`));
        discardBody(req);
      } else if (err.timedOut) {
        res.setHeader('Connection', 'close');
        answer(408, 'application/json', errorJSON(`the request body did not arrive within ${BODY_SECONDS}s`));
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
    const decoded = decodePath(pathname);
    if (decoded === null) {
      res.setHeader('Connection', 'close');
      answer(400, 'application/json', errorJSON('malformed percent-escape in the request path'));
      return;
    }
    readBody(req, (err, body) => {
      if (err) {
        fail(err);
        return;
      }
      const request = wantsRequest
        ? requestInfo(req, decoded, q, body, traceparent)
        : undefined;
      // The watchdog answers 504 itself, or ends a stream whose header went out; the
      // handler's promise is abandoned, its value dropped.
      let watched;
      if (TIMEOUT > 0) {
        watched = {
          deadline: start + TIMEOUT * 1000,
          expired: false,
          streaming: undefined, // a stream's header went out: false, true for text/event-stream
          expire() {
            this.expired = true;
            if (this.streaming === undefined) {
              answer(504, 'application/json', errorJSON(`function timed out after ${TIMEOUT}s`));
              return;
            }
            if (this.streaming) res.write(`: function timed out after ${TIMEOUT}s\n\n`);
            res.end();
            logInvocation(req.method, pathname, res.statusCode, Date.now() - start, traceparent);
          },
        };
        watch(watched);
      }
      const finish = (result) => {
        if (TIMEOUT > 0) {
          if (watched.expired) return;
          if (result.stream !== undefined) {
            sendStream(result.stream);
            return;
          }
          pending.delete(watched);
          // A synchronous handler blocks the timer: it still gets its 504, only late.
          if (Date.now() - start > TIMEOUT * 1000) result = encodeError(new TimeoutError(`function timed out after ${TIMEOUT}s`));
        } else if (result.stream !== undefined) {
          sendStream(result.stream);
          return;
        }
        answer(...result);
      };
      // sendStream writes a stream's items as they come (chunked; each write goes out at
      // once). The first item is awaited before the header: a failure before it is an
      // ordinary 500, and it may be a response object (status, headers).
      const sendStream = async (stream) => {
        const it = iteratorOf(stream);
        const stop = () => {
          if (typeof it.return === 'function') Promise.resolve(it.return()).catch(() => {});
        };
        let first;
        try {
          first = await it.next();
        } catch (err) {
          if (watched === undefined || !watched.expired) {
            if (watched) pending.delete(watched);
            answer(...encodeError(err));
          }
          return;
        }
        if (watched && watched.expired) {
          stop();
          return;
        }
        let status = 200;
        let headers = new Map([['content-type', ['Content-Type', ['text/plain; charset=utf-8']]]]);
        let item = first;
        if (!first.done && isResponse(first.value)) {
          let payload;
          try {
            [status, , payload, headers] = responseOf(first.value);
          } catch (err) {
            stop();
            if (watched) pending.delete(watched);
            answer(500, 'application/json', errorJSON(`invalid response object: ${err.message}`));
            return;
          }
          item = Buffer.byteLength(payload) > 0 ? { value: Buffer.from(payload), done: false } : undefined;
        }
        const ctype = headers.get('content-type');
        const sse = ctype !== undefined && ctype[1][0].split(';')[0].trim().toLowerCase() === 'text/event-stream';
        if (draining) res.setHeader('Connection', 'close');
        for (const [name, values] of headers.values()) res.setHeader(name, values.length === 1 ? values[0] : values);
        res.writeHead(status);
        res.flushHeaders();
        if (watched) watched.streaming = sse;
        let gone = false;
        res.on('close', () => {
          gone = true;
        });
        try {
          for (;;) {
            if (item !== undefined) {
              if (item.done) break;
              if (req.method !== 'HEAD' && !res.write(streamChunk(item.value, sse))) {
                await new Promise((resolve) => {
                  res.once('drain', resolve);
                  res.once('close', resolve);
                });
              }
            }
            if (gone || (watched && watched.expired)) {
              stop(); // the caller left, or the watchdog ended it
              return;
            }
            item = await it.next();
            if (watched && watched.expired) {
              stop();
              return;
            }
          }
        } catch (err) {
          // A failure after the header: the answer is cut short without its last chunk, so
          // the caller sees an incomplete response, never a complete one.
          console.error(err);
          if (watched) pending.delete(watched);
          res.destroy();
          logInvocation(req.method, pathname, status, Date.now() - start, traceparent);
          return;
        }
        if (watched) pending.delete(watched);
        res.end();
        logInvocation(req.method, pathname, status, Date.now() - start, traceparent);
      };
      const result = call(fn, decodeEvent(body), request);
      if (result instanceof Promise) result.then(finish);
      else finish(result);
    });
  });
  // Bounds: headers within 10 s, the body within BODY_SECONDS (readBody), the whole request
  // within both (for a body nothing reads, as on the health path), idle keep-alive 120 s
  // (longer than the gateway's pool and the KEDA interceptor keep theirs, so they close
  // first).
  server.headersTimeout = 10000;
  server.requestTimeout = server.headersTimeout + BODY_SECONDS * 1000;
  server.keepAliveTimeout = 120000;
  const listening = () => {
    fn = load(); // connections are accepted only after this returns
    wantsRequest = fn.length >= 2;
    const a = server.address(); // null on a handed-over descriptor
    const addr = a === null ? `descriptor ${process.env.SLESS_LISTEN_FD}` : typeof a === 'string' ? a : `${a.address}:${a.port}`;
    log('info', 'function listening', { addr, timeout_seconds: TIMEOUT });
  };
  const listenFD = process.env.SLESS_LISTEN_FD;
  if (listenFD) {
    // A Unix socket sless dev bound and handed over; listening on it here makes this
    // process the one its dial checks for.
    server.listen({ fd: Number(listenFD), backlog: 4096 }, listening);
  } else {
    server.listen(envInt('PORT', 8080), process.env.SLESS_HOST || '127.0.0.1', listening);
  }
  const shutdown = (signal) => {
    log('info', 'shutting down', { signal });
    draining = true;
    lastRequest = Date.now();
    // The listener only: http.Server.close closes the idle connections at once as well.
    net.Server.prototype.close.call(server);
    const deadline = Date.now() + SHUTDOWN_GRACE * 1000;
    let quiet = false;
    const poll = setInterval(() => {
      const now = Date.now();
      if (!quiet && (now - lastRequest >= DRAIN_QUIET_MS || now >= deadline)) {
        quiet = true;
        server.closeIdleConnections();
      }
      if ((quiet && inFlight === 0) || now >= deadline) {
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

if (process.env.SLESS_MODE === 'job') {
  runJob(loadHandler());
} else {
  serve(loadHandler);
}
