"""sless HTTP wrapper for Python functions (contract: runtimes/README.md).

Standard library only, so it runs on any python:3.x image without installing anything.
"""
import os
import socket


def _listen_early():
    """Listens before anything else is imported: the kubelet's first readiness probe comes a
    moment after the process starts, and a refused one is retried only a probe period (1 s)
    later; a probe that finds the socket waits in its backlog until the wrapper and the
    handler are loaded. None when the listen happens later (job mode, a bad PORT: the usual
    path reports it)."""
    if os.environ.get("SLESS_MODE") == "job":
        return None
    fd = os.environ.get("SLESS_LISTEN_FD", "")
    try:
        if fd:
            sock = socket.socket(fileno=int(fd))  # bound by sless dev, listened on here
        else:
            host = os.environ.get("SLESS_HOST", "127.0.0.1")
            sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, int(os.environ.get("PORT") or 8080)))
        sock.listen(LISTEN_BACKLOG)
    except (OSError, ValueError):
        return None
    return sock


# The kernel caps it at net.core.somaxconn; a connection beyond a full backlog is refused
# (a Unix socket's at once), so it is as long as Go's and Node's.
LISTEN_BACKLOG = 4096
_EARLY = _listen_early()

# The rest is imported after the early listen, on purpose.
import asyncio
import base64
import binascii
import collections
import importlib
import inspect
import json
import re
import signal
import socketserver
import sys
import threading
import time
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl, unquote

import sless_identity  # beside this file: the verifier of signed calls

HEALTH_PATH = "/healthz"
MAX_HEALTH_HOLD = 2.0  # seconds: the cap of ?hold_ms on the health path


def health_hold(query):
    """Seconds a health request asks to be held (?hold_ms, at most MAX_HEALTH_HOLD): a
    scheduled pre-warm keeps one in flight at all times, so a function scaled on
    concurrency, a point-in-time count, is seen busy until its tick."""
    try:
        ms = int(dict(parse_qsl(query)).get("hold_ms", "0"))
    except ValueError:
        return 0
    return min(max(ms, 0) / 1000, MAX_HEALTH_HOLD)
DRAIN_LIMIT = 64 << 20  # bytes of an oversized body read and dropped before closing



def _quiet_disconnects(server_cls):
    """A client that went away (a health check that gave up) is not an error worth a
    traceback; anything else still is."""
    def handle_error(self, request, client_address):
        if isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            return
        super(server_cls, self).handle_error(request, client_address)
    server_cls.handle_error = handle_error
    return server_cls


@_quiet_disconnects
class _Server(ThreadingHTTPServer):
    # The default listen backlog of 5 resets bursts of new connections (a proxy opening many
    # at once after a cold start).
    request_queue_size = LISTEN_BACKLOG


@_quiet_disconnects
class _UnixServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    """The same server on the Unix socket sless dev hands over."""
    daemon_threads = True


class BodyIncomplete(Exception):
    pass


class BodyTimeout(Exception):
    pass


def env_int(key, default):
    raw = os.environ.get(key, "")
    if raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0:
        sys.exit(f"{key}={raw!r}: want a non-negative integer")
    return value


TIMEOUT = env_int("SLESS_TIMEOUT_SECONDS", 0)
# The body must arrive within the function's timeout, or the longest one a function may set
# (rules.MaxTimeoutSeconds; runtimes/contract_test.go holds them equal) when it has none.
MAX_BODY_SECONDS = 900
BODY_TIME = TIMEOUT or MAX_BODY_SECONDS
MAX_BODY = env_int("SLESS_MAX_BODY_BYTES", 6 << 20)
# Read (and taken out of the environment) before the handler is imported.
IDENTITY_KEY = sless_identity.load_key()
SHUTDOWN_GRACE = env_int("SLESS_SHUTDOWN_SECONDS", 25)
# The drain closes idle keep-alive connections only once no request has come for this long:
# a caller (the interceptor's pool, pinned to this pod through the Service) may be sending
# on one at that instant, and a POST whose connection closed under it is not retried.
DRAIN_QUIET = 1.0


_log_lines = collections.deque()


def log(level, msg, **fields):
    """Queues one JSON log line on stderr. A writer thread flushes the queue every LOG_TICK
    seconds (a write and flush per invocation cost a fifth of a warm call); flush_logs()
    also runs before every exit."""
    record = {"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "level": level, "msg": msg}
    record.update(fields)
    _log_lines.append(json.dumps(record) + "\n")


LOG_TICK = 0.05


def flush_logs():
    lines = []
    while _log_lines:
        lines.append(_log_lines.popleft())  # atomic; appends may continue meanwhile
    if lines:
        sys.stderr.write("".join(lines))
        sys.stderr.flush()


def log_writer():
    while True:
        time.sleep(LOG_TICK)
        flush_logs()


def load_handler():
    spec = os.environ.get("SLESS_HANDLER", "handler.handle")
    module_name, _, func_name = spec.rpartition(".")
    if not module_name:
        sys.exit(f"SLESS_HANDLER={spec!r}: want module.function, e.g. handler.handle")
    handler_dir = os.environ.get("SLESS_HANDLER_DIR") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "handler")
    sys.path.insert(0, os.path.abspath(handler_dir))
    func = getattr(importlib.import_module(module_name), func_name, None)
    if not callable(func):
        sys.exit(f"SLESS_HANDLER={spec!r}: {module_name} has no function {func_name}")
    try:
        params = [p for p in inspect.signature(func).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)]
        wants_request = len(params) >= 2 or any(p.kind == p.VAR_POSITIONAL for p in params)
    except (TypeError, ValueError):
        wants_request = False
    is_async = inspect.iscoroutinefunction(func)

    def call(event, request):
        out = func(event, request) if wants_request else func(event)
        return asyncio.run(out) if is_async else out

    call.wants_request = wants_request
    return call


class Outcome:
    __slots__ = ("value", "error", "timed_out")

    def __init__(self, value=None, error=None, timed_out=False):
        self.value, self.error, self.timed_out = value, error, timed_out


def run_handler(call, event, request):
    try:
        return Outcome(value=call(event, request))
    except BaseException as exc:  # the function's failure is reported, never fatal to the wrapper
        traceback.print_exc()
        return Outcome(error=f"{type(exc).__name__}: {exc}")


class Watchdog:
    """Answers 504 for invocations past TIMEOUT while their handlers run on, abandoned, on
    their connection threads (Python cannot stop a thread). Per call it costs one dict insert
    and one pop (atomic under the GIL: whoever pops an entry answers); a tick of TICK seconds
    finds the expired ones, so a 504 comes at most TICK late."""

    TICK = 0.05

    def __init__(self):
        self.in_flight, self.answering = {}, threading.Lock()
        threading.Thread(target=self.run, name="watchdog", daemon=True).start()

    def start(self, handler, path, started):
        self.in_flight[handler] = (time.monotonic() + TIMEOUT, path, started)

    def finish(self, handler):
        """True when the handler finished first, False when the watchdog answered."""
        if self.in_flight.pop(handler, None) is not None:
            return True
        with self.answering:  # returns once the 504 is written
            return False

    def run(self):
        while True:
            time.sleep(self.TICK)
            now = time.monotonic()
            for handler, (deadline, path, started) in list(self.in_flight.items()):
                if deadline <= now:
                    with self.answering:
                        if self.in_flight.pop(handler, None) is not None:
                            handler.answer_timeout(path, started)


def run_drained(call, event, request):
    """run_handler with a streamed result drained into one text (job mode)."""
    def drained(event, request):
        value = call(event, request)
        return drain_stream(value) if is_stream(value) else value
    return run_handler(drained, event, request)


def invoke_job(call, event, request):
    """Job mode: one call on a daemon thread, abandoned after TIMEOUT."""
    if TIMEOUT == 0:
        return run_drained(call, event, request)
    box = []
    worker = threading.Thread(target=lambda: box.append(run_drained(call, event, request)), daemon=True)
    worker.start()
    worker.join(TIMEOUT)
    return box[0] if box else Outcome(timed_out=True)


def timeout_body():
    return dumps({"error": f"function timed out after {TIMEOUT}s"})


# A % not followed by two hex digits: Go's net/http refuses such a path, and so do we.
MALFORMED_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")


def query_values(query):
    """Each name's first value, and all of its values in order."""
    multi = {}
    for name, value in parse_qsl(query, keep_blank_values=True):
        multi.setdefault(name, []).append(value)
    return {name: values[0] for name, values in multi.items()}, multi


def decode_event(body):
    if not body.strip():
        return {}
    try:
        value = json.loads(body)
    except ValueError:
        return {"body": body.decode("utf-8", "replace")}
    return value if isinstance(value, dict) else {"body": value}


def dumps(value):
    return json.dumps(value, separators=(",", ":")).encode()


def encode(outcome):
    """Returns (status, content type, bytes) for an outcome."""
    if outcome.timed_out:
        return 504, "application/json", timeout_body()
    if outcome.error is not None:
        return 500, "application/json", dumps({"error": outcome.error})
    if isinstance(outcome.value, str):
        return 200, "text/plain; charset=utf-8", outcome.value.encode()
    try:
        return 200, "application/json", dumps(outcome.value)
    except (TypeError, ValueError) as exc:
        return 500, "application/json", dumps({"error": f"result is not JSON-encodable: {exc}"})


# A result that is a dict with an int "statusCode" is a response object (runtimes/README.md).
RESPONSE_KEYS = {"statusCode", "headers", "multiValueHeaders", "body", "isBase64Encoded"}
# Set by the wrapper or the platform; a handler's values for them are dropped.
DROPPED_HEADERS = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade",
                   "te", "trailer", "content-length"}
TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
BAD_VALUE = re.compile(r"[\r\n\x00]")


class InvalidResponse(Exception):
    pass


def is_response(value):
    return isinstance(value, dict) and type(value.get("statusCode")) is int


def header_values(name, value):
    if isinstance(value, (list, tuple)):
        return [header_value(name, v) for v in value]
    return [header_value(name, value)]


def header_value(name, value):
    if isinstance(value, bool):
        value = "true" if value else "false"
    elif isinstance(value, (int, float)):
        value = str(value)
    if not isinstance(value, str):
        raise InvalidResponse(f"header {name}: want a string, got {type(value).__name__}")
    if BAD_VALUE.search(value):
        raise InvalidResponse(f"header {name}: a value may not contain CR, LF or NUL")
    return value


def response_of(value):
    """Returns (status, [(name, value)], body bytes) for a response object."""
    unknown = sorted(set(value) - RESPONSE_KEYS)
    if unknown:
        raise InvalidResponse(f"unknown key {unknown[0]!r}; a response object has {', '.join(sorted(RESPONSE_KEYS))}")
    status = value["statusCode"]
    if not 100 <= status <= 599:
        raise InvalidResponse(f"statusCode {status} is not in 100-599")
    headers = []
    for field in ("headers", "multiValueHeaders"):
        given = value.get(field) or {}
        if not isinstance(given, dict):
            raise InvalidResponse(f"{field}: want an object of header names")
        for name, v in given.items():
            if not isinstance(name, str) or not TOKEN.match(name):
                raise InvalidResponse(f"{field}: {name!r} is not a valid header name")
            if name.lower() in DROPPED_HEADERS or name.lower().startswith("x-sless-"):
                continue
            headers.extend((name, one) for one in header_values(name, v))
    body, ctype = value.get("body"), "text/plain; charset=utf-8"
    if value.get("isBase64Encoded"):
        if not isinstance(body, str):
            raise InvalidResponse("isBase64Encoded needs the body as a base64 string")
        try:
            payload = base64.b64decode(body, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise InvalidResponse(f"body is not valid base64: {exc}") from None
        ctype = "application/octet-stream"
    elif body is None:
        payload = b""
    elif isinstance(body, str):
        payload = body.encode()
    else:
        payload, ctype = dumps(body), "application/json"
    if not any(name.lower() == "content-type" for name, _ in headers):
        headers.append(("Content-Type", ctype))
    return status, headers, payload


def http_response(outcome):
    """Returns (status, [(name, value)], bytes) for an HTTP answer."""
    if outcome.timed_out or outcome.error is not None or not is_response(outcome.value):
        status, ctype, payload = encode(outcome)
        return status, [("Content-Type", ctype)], payload
    try:
        return response_of(outcome.value)
    except (InvalidResponse, TypeError, ValueError) as exc:
        return 500, [("Content-Type", "application/json")], dumps({"error": f"invalid response object: {exc}"})


def is_stream(value):
    """A generator or async generator result is streamed, one chunk per item."""
    return inspect.isgenerator(value) or inspect.isasyncgen(value)


SSE_FIELDS = {"event", "id", "retry", "data"}


def stream_chunk(item, sse):
    """The bytes one streamed item is sent as (runtimes/README.md, "Streamed responses"):
    bytes as given; in a text/event-stream a string is one event's data and an object of
    event/id/retry/data one whole event; otherwise a string as given and any other value as
    a line of JSON."""
    if isinstance(item, (bytes, bytearray, memoryview)):
        return bytes(item)
    if sse:
        fields = item if isinstance(item, dict) and item and set(item) <= SSE_FIELDS else {"data": item}
        lines = []
        for name in ("event", "id", "retry"):
            if fields.get(name) is not None:
                lines.append(f"{name}: {fields[name]}")
        data = fields.get("data")
        text = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
        lines.extend("data: " + line for line in text.split("\n"))
        return ("\n".join(lines) + "\n\n").encode()
    if isinstance(item, str):
        return item.encode()
    return dumps(item) + b"\n"


def iterate(stream):
    """Yields a generator's or an async generator's items, each as it is produced."""
    if inspect.isgenerator(stream):
        yield from stream
        return
    loop = asyncio.new_event_loop()
    try:
        while True:
            try:
                yield loop.run_until_complete(stream.__anext__())
            except StopAsyncIteration:
                return
    finally:
        try:
            loop.run_until_complete(stream.aclose())
        except BaseException:  # the generator's own failure while closing
            pass
        loop.close()


def drain_stream(stream):
    """A streamed result as one value (job mode, triggers): its chunks joined as text."""
    return b"".join(stream_chunk(item, False) for item in iterate(stream)).decode("utf-8", "replace")


_NO_ITEM = object()  # a stream's end (None is an item)


def raw_body(body):
    try:
        return body.decode("utf-8"), False
    except UnicodeDecodeError:
        return base64.b64encode(body).decode(), True


class BodyTooLarge(Exception):
    pass


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body are separate writes
    # Every blocking read of a request line or headers, or waiting on an idle keep-alive
    # connection, gives up after this long (longer than the gateway's pool and the KEDA
    # interceptor keep idle connections, so they close first); the body has BODY_TIME.
    timeout = 120
    call = None
    server_version = "sless-python"

    def log_message(self, fmt, *args):  # access logging is done once per invocation below
        pass

    def handle(self):
        """Serves the connection's requests one after another. A connection waiting for its
        next request is idle, and the drain closes it once requests stopped coming; one whose
        request has begun to arrive is busy, and the drain waits for it and ends the
        connection after its response. Without this a keep-alive connection (pinned to this
        pod through the Service) would be cut mid-request at exit."""
        server = self.server
        self.close_connection = True
        self.out_lock = threading.Lock()  # the watchdog and a stream write to one connection
        while True:
            with server.lock:
                if server.idle is None:  # drained: no more requests on this connection
                    return
                server.idle.add(self)
            try:
                arrived = self.rfile.peek(1)
            except OSError:  # the read timeout, or the drain shut the socket
                arrived = b""
            with server.lock:
                if server.idle is None or self not in server.idle:  # the drain closed it while idle
                    return
                server.idle.discard(self)
                if not arrived:
                    return
                server.busy.add(self)
                server.last_request = time.monotonic()
            try:
                self.handle_one_request()
            finally:
                with server.lock:
                    server.busy.discard(self)
            if self.close_connection:
                return

    def read_body(self, deadline):
        """The request body, read by the monotonic deadline (BodyTimeout after it, however
        often bytes trickle in); BodyIncomplete when the connection ended first."""
        chunked = self.headers.get("Transfer-Encoding", "").lower() == "chunked"
        length = 0 if chunked else int(self.headers.get("Content-Length") or 0)
        if length < 0:
            raise ValueError("negative Content-Length")
        if length > MAX_BODY:
            raise BodyTooLarge()
        if not chunked and length == 0:
            return b""
        try:
            return self.read_chunked(deadline) if chunked else self.read_exactly(length, deadline)
        finally:
            self.connection.settimeout(self.timeout)  # the answer and the next request's bounds

    def within(self, deadline, read, arg):
        """read(arg) on the request's stream (one socket read at most), given what is left
        until the deadline."""
        left = deadline - time.monotonic()
        if left <= 0:
            raise BodyTimeout()
        self.connection.settimeout(left)
        try:
            return read(arg)
        except TimeoutError:
            raise BodyTimeout() from None

    def read_exactly(self, size, deadline):
        parts = []
        while size > 0:
            part = self.within(deadline, self.rfile.read1, size)
            if not part:
                raise BodyIncomplete()
            parts.append(part)
            size -= len(part)
        return b"".join(parts)

    def read_line(self, deadline):
        """One line of a chunked body, as readline: short (b"" at the end) when the
        connection ended."""
        line = b""
        while not line.endswith(b"\n"):
            data = self.within(deadline, self.rfile.peek, 1)
            if not data:
                break
            end = data.find(b"\n")
            line += self.rfile.read(end + 1 if end >= 0 else len(data))
            if len(line) > MAX_BODY:
                raise BodyTooLarge()
        return line

    def read_chunked(self, deadline):
        chunks, total = [], 0
        while True:
            size = int(self.read_line(deadline).split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while self.read_line(deadline) not in (b"\r\n", b"\n", b""):
                    pass
                return b"".join(chunks)
            total += size
            if total > MAX_BODY:
                raise BodyTooLarge()
            chunks.append(self.read_exactly(size, deadline))
            self.read_line(deadline)

    def discard_body(self):
        """Reads (a bounded amount of) an oversized body so the client, still sending, gets
        the 413 instead of a broken pipe."""
        left = min(int(self.headers.get("Content-Length") or 0), DRAIN_LIMIT)
        while left > 0:
            chunk = self.rfile.read(min(left, 1 << 16))
            if not chunk:
                return
            left -= len(chunk)

    def answer_timeout(self, path, start):
        """Runs on the watchdog thread while the handler is still running on this one: a
        504 before a stream's header went out, else the stream's clean end."""
        with self.out_lock:
            streaming, self.streaming = self.streaming, None
            try:
                if streaming is None:
                    self.respond(504, "application/json", timeout_body(), close=True)
                else:
                    if streaming:  # text/event-stream: a last comment says why it ended
                        self.write_chunk(f": function timed out after {TIMEOUT}s\n\n".encode())
                    self.wfile.write(b"0\r\n\r\n")
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # the client left
        log("info", "invocation", method=self.command, path=path, status=504 if streaming is None else self.stream_status,
            duration_ms=int((time.monotonic() - start) * 1000), traceparent=self.headers.get("traceparent", ""),
            **({} if streaming is None else {"stream_end": "timeout"}))

    def write_chunk(self, data):
        if data and self.command != "HEAD":
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    def send_stream(self, stream):
        """Streams a generator's items as they are produced (chunked, each written at once).
        The first item is taken before the header goes out: a failure before it is an
        ordinary 500, and it may be a response object (status, headers). The watchdog ends
        the stream at the function's timeout (answer_timeout). Returns the status sent, 0
        when the watchdog answered, or (status, headers, payload) to answer as a whole."""
        items = iterate(stream)
        try:
            first = next(items, _NO_ITEM)
        except BaseException as exc:
            traceback.print_exc()
            return http_response(Outcome(error=f"{type(exc).__name__}: {exc}"))
        status, headers = 200, [("Content-Type", "text/plain; charset=utf-8")]
        if is_response(first):
            try:
                status, headers, payload = response_of(first)
            except (InvalidResponse, TypeError, ValueError) as exc:
                items.close()
                return 500, [("Content-Type", "application/json")], dumps({"error": f"invalid response object: {exc}"})
            first = payload or _NO_ITEM
        sse = any(n.lower() == "content-type" and v.split(";")[0].strip().lower() == "text/event-stream" for n, v in headers)
        watchdog = self.server.watchdog
        with self.out_lock:
            if watchdog and self not in watchdog.in_flight:
                items.close()
                return 0  # the watchdog answers 504: the first item came too late
            # The watchdog ends a stream at the timeout by shutting the connection (this
            # thread may still be inside the generator): say so up front, so no client sends
            # its next call on a connection about to close.
            if self.server.draining or watchdog:
                self.close_connection = True
                headers = headers + [("Connection", "close")]
            self.send_response(status)
            for name, value in headers:
                self.send_header(name, value)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.streaming, self.stream_status = sse, status
        item = first
        try:
            while True:
                if item is not _NO_ITEM:
                    data = stream_chunk(item, sse)
                    with self.out_lock:
                        if self.streaming is None:
                            items.close()
                            return 0  # ended by the watchdog
                        self.write_chunk(data)
                item = next(items, _NO_ITEM)
                if item is _NO_ITEM:
                    break
        except (BrokenPipeError, ConnectionResetError):
            items.close()  # the caller left; the generator's finally blocks run
            self.end_stream(cut=True)
            return status
        except BaseException:
            # A failure after the header: the answer is cut short without its last chunk,
            # so the caller sees an incomplete response, never a complete one.
            traceback.print_exc()
            self.end_stream(cut=True)
            return status
        return status if self.end_stream(cut=False) else 0

    def end_stream(self, cut):
        """Ends a stream this thread sent: with its last chunk, or cut (the connection shut).
        False when the watchdog ended it first."""
        watchdog = self.server.watchdog
        if watchdog and not watchdog.finish(self):
            return False
        with self.out_lock:
            self.streaming = None
            try:
                if cut:
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                elif self.command != "HEAD":
                    self.wfile.write(b"0\r\n\r\n")
            except OSError:
                self.close_connection = True  # the client left
        return True

    def respond(self, status, ctype, payload, close=False, headers=None):
        if self.server.draining:
            close = self.close_connection = True  # the connection ends with this response
        self.send_response(status)
        for name, value in headers if headers is not None else [("Content-Type", ctype)]:
            self.send_header(name, value)
        no_body = status in (204, 304) or status < 200
        if not no_body:
            self.send_header("Content-Length", str(len(payload)))
        if close:
            self.send_header("Connection", "close")
        self.end_headers()
        if not no_body and self.command != "HEAD":
            self.wfile.write(payload)

    def refuse_unsigned(self, path):
        """Answers a call the platform did not sign for this function (sless_identity) and
        says so; the request target is the raw one (self.path has '//' folded)."""
        words = self.requestline.split()
        refused = sless_identity.refusal(IDENTITY_KEY, self.command, words[1] if len(words) > 1 else self.path,
                                         self.headers.items(), time.time())
        if refused is None:
            return False
        status, _, message = refused
        self.close_connection = True  # its body is never read
        self.respond(status, "application/json", dumps({"error": message}), close=True)
        log("info", "invocation", method=self.command, path=path, status=status, duration_ms=0,
            traceparent=self.headers.get("traceparent", ""))
        return True

    def handle_any(self):
        path, _, query = self.path.partition("?")
        if path == HEALTH_PATH and self.command == "GET":
            hold = health_hold(query)
            if hold > 0 and not self.server.draining:
                time.sleep(hold)
            self.respond(200, "application/json", b'{"status":"ok"}')
            return
        if self.refuse_unsigned(path):
            return
        if MALFORMED_ESCAPE.search(path):
            self.close_connection = True
            self.respond(400, "application/json", dumps({"error": "malformed percent-escape in the request path"}), close=True)
            return
        start = time.monotonic()
        self.streaming = None  # a stream's header went out: False, True for text/event-stream
        try:
            body = self.read_body(start + BODY_TIME)
        except BodyTooLarge:
            status, ctype, payload = 413, "application/json", dumps({"error": f"request body exceeds {MAX_BODY} bytes"})
            self.close_connection = True  # the rest of the body makes the connection unusable
            self.respond(status, ctype, payload)
            self.discard_body()
        except BodyTimeout:
            status = 408
            self.close_connection = True
            try:
                self.respond(status, "application/json", dumps({"error": f"the request body did not arrive within {BODY_TIME}s"}), close=True)
            except OSError:
                pass  # the client is gone
        except (BodyIncomplete, ValueError) as exc:
            status = 400
            self.close_connection = True
            try:
                self.respond(status, "application/json", dumps({"error": f"incomplete or malformed request body ({type(exc).__name__}); nothing was invoked"}), close=True)
            except OSError:
                pass  # the client is gone
        else:
            request = None
            if self.call.wants_request:
                multi = {}
                for k, v in self.headers.items():
                    multi.setdefault(k.lower(), []).append(v)
                text, is_b64 = raw_body(body)
                first, multi_query = query_values(query)
                request = {
                    "method": self.command, "path": unquote(path), "traceparent": self.headers.get("traceparent", ""),
                    "query": first, "multiValueQuery": multi_query,
                    "headers": {k: ", ".join(v) for k, v in multi.items()},
                    "multiValueHeaders": multi, "body": text, "isBase64Encoded": is_b64,
                }
            watchdog = self.server.watchdog
            if watchdog:
                watchdog.start(self, path, start)
            outcome = run_handler(self.call, decode_event(body), request)
            answer = None
            if outcome.error is None and is_stream(outcome.value):
                answer = self.send_stream(outcome.value)
                if answer == 0:
                    self.close_connection = True  # the watchdog answered and closed it
                    return
            if not isinstance(answer, int):
                if watchdog and not watchdog.finish(self):
                    self.close_connection = True  # the watchdog answered 504 and closed it
                    return
                status, headers, payload = answer or http_response(outcome)
                self.respond(status, None, payload, headers=headers)
            else:
                status = answer
        log("info", "invocation", method=self.command, path=path, status=status,
            duration_ms=int((time.monotonic() - start) * 1000), traceparent=self.headers.get("traceparent", ""))

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = handle_any


def listen():
    """Binds and listens before the handler is imported: a readiness probe that arrives
    meanwhile waits in the backlog and is answered once the handler is loaded, instead of
    being refused and retried a probe period later (most of a cold start)."""
    listen_fd = os.environ.get("SLESS_LISTEN_FD", "")
    if listen_fd:
        if _EARLY is None:
            raise SystemExit(f"SLESS_LISTEN_FD={listen_fd!r}: not a socket to listen on")
        Handler.disable_nagle_algorithm = False  # TCP only
        server = _UnixServer("", Handler, bind_and_activate=False)
        server.socket.close()
        server.socket, server.server_address = _EARLY, _EARLY.getsockname()
        return server, server.server_address
    address = (os.environ.get("SLESS_HOST", "127.0.0.1"), env_int("PORT", 8080))
    if _EARLY is None:
        server = _Server(address, Handler)
    else:
        server = _Server(address, Handler, bind_and_activate=False)
        server.socket.close()
        server.socket, server.server_address = _EARLY, _EARLY.getsockname()
    return server, f"{address[0]}:{server.server_address[1]}"


def serve(server, addr, call):
    Handler.call = staticmethod(call)
    server.daemon_threads = True  # the drain decides what exit waits for
    server.lock = threading.Lock()
    server.idle, server.busy = set(), set()  # connections waiting for a request / serving one
    server.draining = False
    server.last_request = 0.0  # monotonic time a request last began to arrive
    server.watchdog = Watchdog() if TIMEOUT else None

    def on_term(signum, _frame):
        log("info", "shutting down", signal=signum)
        # Answers end their connection from now on, not from when serve_forever's poll
        # (half a second) returns and drain() begins.
        server.draining = True
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    log("info", "function listening", addr=addr, timeout_seconds=TIMEOUT)
    server.serve_forever()
    drain(server)
    flush_logs()


def drain(server):
    """After SIGTERM: refuse new connections at once (a caller's dial retry finds another
    pod); answer what comes on open ones with Connection: close and, once none came for
    DRAIN_QUIET, close the idle ones; let busy ones finish their request (up to the grace
    period) and close them after the response."""
    server.server_close()
    deadline = time.monotonic() + SHUTDOWN_GRACE
    with server.lock:
        server.last_request = time.monotonic()
    while server.idle and time.monotonic() < min(deadline, server.last_request + DRAIN_QUIET):
        time.sleep(0.02)
    with server.lock:
        idle, server.idle = server.idle, None
    for handler in idle:
        try:
            handler.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # already gone
    while server.busy and time.monotonic() < deadline:
        time.sleep(0.02)


def write_termination_log(payload):
    path = os.environ.get("SLESS_TERMINATION_LOG", "")
    explicit = path != ""
    if not explicit:
        path = "/dev/termination-log"
        if not os.path.exists(path):  # Kubernetes creates it; never create it outside a pod
            return
    try:
        with open(path, "wb") as f:
            f.write(payload[:4096])
    except OSError as exc:
        if explicit:
            log("error", "writing the termination message", path=path, error=str(exc))


def run_job(call):
    raw = os.environ.get("SLESS_EVENT")
    body = raw.encode() if raw is not None else sys.stdin.buffer.read(MAX_BODY + 1)
    if len(body) > MAX_BODY:
        outcome = Outcome(error=f"job event exceeds {MAX_BODY} bytes")
    else:
        traceparent = os.environ.get("TRACEPARENT", "")
        outcome = invoke_job(call, decode_event(body), {"mode": "job", "traceparent": traceparent})
    status, _, payload = encode(outcome)
    sys.stdout.buffer.write(payload + b"\n")
    sys.stdout.flush()
    write_termination_log(payload)
    code = 0 if status == 200 else 1
    log("info", "job finished", exit_code=code, traceparent=os.environ.get("TRACEPARENT", ""))
    return code


def main():
    threading.Thread(target=log_writer, name="log-writer", daemon=True).start()
    if os.environ.get("SLESS_MODE") == "job":
        code = run_job(load_handler())
        sys.stdout.flush()
        flush_logs()
        os._exit(code)  # abandoned timed-out threads must not keep the job alive
    server, addr = listen()
    serve(server, addr, load_handler())


if __name__ == "__main__":
    main()
