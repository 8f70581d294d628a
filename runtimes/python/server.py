"""sless HTTP wrapper for Python functions (contract: runtimes/README.md).

Standard library only, so it runs on any python:3.x image without installing anything.
"""
import asyncio
import base64
import collections
import http.client
import importlib
import inspect
import io
import json
import os
import signal
import socket
import sys
import threading
import time
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl, urlsplit

HEALTH_PATH = "/healthz"
DRAIN_LIMIT = 64 << 20  # bytes of an oversized body read and dropped before closing



class _Server(ThreadingHTTPServer):
    # The default listen backlog of 5 resets bursts of new connections (a proxy opening many
    # at once after a cold start).
    request_queue_size = 128

    def finish_request(self, request, client_address):
        # Connections handed over by the pool get their own handler class: the wrapper's own
        # connections pay nothing for the handoff.
        cls = DirectHandler if type(request) is HandedSocket else self.RequestHandlerClass
        cls(request, client_address, self)


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
MAX_BODY = env_int("SLESS_MAX_BODY_BYTES", 6 << 20)
SHUTDOWN_GRACE = env_int("SLESS_SHUTDOWN_SECONDS", 25)


_log_lines = collections.deque()
_flush_lock = threading.Lock()  # an immediate flush must not overtake the writer thread's lines


def log(level, msg, **fields):
    """Queues one JSON log line on stderr. A writer thread flushes the queue every LOG_TICK
    seconds (a write and flush per invocation cost a fifth of a warm call); flush_logs()
    also runs before every exit."""
    record = {"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "level": level, "msg": msg}
    record.update(fields)
    _log_lines.append(json.dumps(record) + "\n")


LOG_TICK = 0.05


def flush_logs():
    with _flush_lock:
        lines = []
        while _log_lines:
            lines.append(_log_lines.popleft())  # atomic; appends may continue meanwhile
        if lines:
            sys.stderr.write("".join(lines))
            sys.stderr.flush()


def log_writer():
    while True:
        time.sleep(LOG_TICK)
        if DirectHandler.active:
            # The pool must not take a process answering a long direct invocation for idle.
            log_direct("direct busy")
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


def invoke_job(call, event, request):
    """Job mode: one call on a daemon thread, abandoned after TIMEOUT."""
    if TIMEOUT == 0:
        return run_handler(call, event, request)
    box = []
    worker = threading.Thread(target=lambda: box.append(run_handler(call, event, request)), daemon=True)
    worker.start()
    worker.join(TIMEOUT)
    return box[0] if box else Outcome(timed_out=True)


def timeout_body():
    return dumps({"error": f"function timed out after {TIMEOUT}s"})


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


class BodyTooLarge(Exception):
    pass


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body are separate writes
    call = None
    server_version = "sless-python"

    def log_message(self, fmt, *args):  # access logging is done once per invocation below
        pass

    def read_body(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            return self.read_chunked()
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            raise BodyTooLarge()
        return self.rfile.read(length)

    def read_chunked(self):
        chunks, total = [], 0
        while True:
            size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass
                return b"".join(chunks)
            total += size
            if total > MAX_BODY:
                raise BodyTooLarge()
            chunks.append(self.rfile.read(size))
            self.rfile.readline()

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
        """Runs on the watchdog thread while the handler is still running on this one."""
        try:
            self.respond(504, "application/json", timeout_body(), close=True)
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # the client left
        self.log_invocation(path, 504, start)

    def log_invocation(self, path, status, start):
        log("info", "invocation", method=self.command, path=path, status=status,
            duration_ms=int((time.monotonic() - start) * 1000), traceparent=self.headers.get("traceparent", ""))

    def respond(self, status, ctype, payload, close=False):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(payload)))
        if close:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(payload)

    def handle_any(self):
        path, _, query = self.path.partition("?")
        if path == HEALTH_PATH and self.command == "GET":
            self.respond(200, "application/json", b'{"status":"ok"}')
            return
        active = self.server.active
        active.add(self)  # until the response is written: SIGTERM waits for it
        try:
            start = time.monotonic()
            try:
                body = self.read_body()
            except BodyTooLarge:
                status, ctype, payload = 413, "application/json", dumps({"error": f"request body exceeds {MAX_BODY} bytes"})
                self.close_connection = True  # the rest of the body makes the connection unusable
                self.respond(status, ctype, payload)
                self.discard_body()
            else:
                request = None
                if self.call.wants_request:
                    request = {
                        "method": self.command, "path": path, "traceparent": self.headers.get("traceparent", ""),
                        "query": dict(parse_qsl(query, keep_blank_values=True)),
                        "headers": {k.lower(): v for k, v in self.headers.items()},
                    }
                watchdog = self.server.watchdog
                if watchdog:
                    watchdog.start(self, path, start)
                outcome = run_handler(self.call, decode_event(body), request)
                if watchdog and not watchdog.finish(self):
                    self.close_connection = True  # the watchdog answered 504 and closed it
                    return
                status, ctype, payload = encode(outcome)
                self.respond(status, ctype, payload)
        finally:
            active.discard(self)
        self.log_invocation(path, status, start)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = handle_any


# Connection handoff (sless dev only, runtimes/README.md): the pool hands this process client
# connections the gateway has already routed once, so that their later requests skip the
# gateway's proxy hop.

HOP_BY_HOP = frozenset(("connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade"))


class HandedSocket(socket.socket):
    """A client connection handed over by the pool; prefix holds the bytes of its next request
    that the gateway already read."""
    prefix = b""


class PrefixedRaw(io.RawIOBase):
    """The input of a handed connection: its prefix first, then the socket."""

    def __init__(self, prefix, raw):
        self.prefix, self.raw = prefix, raw

    def readable(self):
        return True

    def readinto(self, buf):
        if not self.prefix:
            return self.raw.readinto(buf)
        n = min(len(buf), len(self.prefix))
        buf[:n], self.prefix = self.prefix[:n], self.prefix[n:]
        return n

    def close(self):
        self.raw.close()
        super().close()


def log_direct(msg, **fields):
    """Logs a line with the current count of direct invocations. The pool keeps the last count
    it reads, so each line is queued under the lock that guards the count: never a stale one
    last."""
    with DirectHandler.lock:
        log("info", msg, **fields, direct=True, active=DirectHandler.active)


class DirectHandler(Handler):
    """Serves a handed connection: a request under fn_prefix is an invocation, answered as if
    the gateway had forwarded it; any other request is proxied to the gateway."""
    fn_prefix, gateway = "", None  # set by serve(); gateway is (host, port)
    active, lock = 0, threading.Lock()  # direct invocations started and not yet answered
    answered = True  # False while the current request is counted in active
    close_logged = False
    handlers = set()  # open handed connections, guarded by lock
    closing = False  # SIGTERM came: idle and newly arriving connections are closed
    busy = False  # a request of this connection is being answered

    def setup(self):
        super().setup()
        if self.request.prefix:
            self.rfile = io.BufferedReader(PrefixedRaw(self.request.prefix, self.rfile.detach()))
        with self.lock:
            DirectHandler.handlers.add(self)
            closing = DirectHandler.closing
        if closing:
            self.shut()

    def finish(self):
        with self.lock:
            DirectHandler.handlers.discard(self)
        super().finish()
        self.log_closed()

    def shut(self):
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    @classmethod
    def close_idle(cls):
        """At SIGTERM: a client must learn at once that its idle connection is gone, not when
        the process exits, or it sends its next request into the exit."""
        with cls.lock:
            cls.closing = True
            idle = [handler for handler in cls.handlers if not handler.busy]
        for handler in idle:
            handler.shut()

    def log_closed(self):
        # The pool counts the connections it handed to this process.
        if not self.close_logged:
            self.close_logged = True
            log_direct("direct connection closed")

    def handle_any(self):
        self.busy = True
        try:
            self.serve_handed()
        finally:
            self.busy = False

    def serve_handed(self):
        path, sep, query = self.path.partition("?")
        if path != self.fn_prefix and not path.startswith(self.fn_prefix + "/"):
            self.proxy()
            return
        path = path[len(self.fn_prefix):] or "/"
        self.path = path + sep + query
        if self.call.wants_request:  # only the request metadata shows them
            headers = self.headers
            for name, value in (("X-Forwarded-For", self.client_address[0]), ("X-Forwarded-Host", headers.get("Host", "")),
                                ("X-Forwarded-Proto", "http")):
                del headers[name]  # a client's own values must not pass for the gateway's
                headers[name] = value
        if path == HEALTH_PATH and self.command == "GET":
            Handler.handle_any(self)  # a readiness answer, not an invocation
            return
        with self.lock:
            DirectHandler.active += 1
            self.answered = False
        try:
            Handler.handle_any(self)
        finally:
            self.count_answered()  # when no response could be written

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = handle_any

    def respond(self, status, ctype, payload, close=False):
        try:
            Handler.respond(self, status, ctype, payload, close)
        finally:
            self.count_answered()  # before the invocation line, which reports the count after it

    def count_answered(self):
        if not self.answered:
            self.answered = True
            with self.lock:
                DirectHandler.active -= 1

    def answer_timeout(self, path, start):
        super().answer_timeout(path, start)
        self.log_closed()  # closed now; the abandoned handler may run on for long

    def log_invocation(self, path, status, start):
        elapsed_us = int((time.monotonic() - start) * 1e6)
        log_direct("invocation", method=self.command, path=path, status=status, duration_ms=elapsed_us // 1000,
                   traceparent=self.headers.get("traceparent", ""),
                   start_us=time.time_ns() // 1000 - elapsed_us, duration_us=elapsed_us)

    def proxy(self):
        """Forwards the request to the gateway and its response back, both bodies streamed
        (server-sent events keep flowing)."""
        gateway = http.client.HTTPConnection(*self.gateway)
        try:
            try:
                self.forward(gateway)
                response = gateway.getresponse()
            except (OSError, http.client.HTTPException) as exc:
                log("error", "proxying to the gateway", path=self.path, error=str(exc))
                # close: the request body may be partly unread
                self.respond(502, "application/json", dumps({"error": f"proxying to the gateway: {exc}"}), close=True)
                return
            self.relay(response)
        except (OSError, http.client.HTTPException):
            self.close_connection = True  # a response cut short: only closing tells the client
        finally:
            gateway.close()

    def forward(self, gateway):
        chunked = self.headers.get("Transfer-Encoding", "").lower() == "chunked"
        gateway.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
        for name, value in self.headers.items():  # Host included
            if name.lower() not in HOP_BY_HOP and not (chunked and name.lower() == "content-length"):
                gateway.putheader(name, value)
        gateway.putheader("X-Sless-No-Handoff", "1")  # the gateway must not hand this connection on
        if chunked:
            gateway.putheader("Transfer-Encoding", "chunked")
        gateway.endheaders()
        if not chunked:
            self.copy_body(int(self.headers.get("Content-Length") or 0), gateway.send)
            return
        while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
            gateway.send(b"%x\r\n" % size)
            self.copy_body(size, gateway.send)
            gateway.send(b"\r\n")
            self.rfile.readline()
        while self.rfile.readline() not in (b"\r\n", b"\n", b""):
            pass  # trailers are dropped
        gateway.send(b"0\r\n\r\n")

    def copy_body(self, size, send):
        while size > 0:
            data = self.rfile.read1(min(size, 1 << 16))  # what has arrived: a slow upload flows on
            if not data:
                raise ConnectionAbortedError("the client closed the connection in the request body")
            send(data)
            size -= len(data)

    def relay(self, response):
        self.send_response_only(response.status, response.reason)  # Date and Server are the gateway's
        for name, value in response.getheaders():
            if name.lower() not in HOP_BY_HOP:
                self.send_header(name, value)
        bodyless = self.command == "HEAD" or response.status in (204, 304) or response.status < 200
        chunked = not bodyless and response.getheader("Content-Length") is None
        if chunked:  # http.client has decoded the gateway's framing
            self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        if bodyless:
            return
        while data := response.read1(1 << 16):
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data) if chunked else data)
        if chunked:
            self.wfile.write(b"0\r\n\r\n")
        elif response.length:
            self.close_connection = True  # the gateway sent less than it announced


def receive_handoffs(server, fd):
    """Serves the connections the pool sends on the control socket fd: one JSON line each, sent
    with the connection's descriptor (SCM_RIGHTS). Lines are read until EOF; the wrapper
    never writes to the socket."""
    control = socket.socket(fileno=fd)
    control.set_inheritable(False)  # processes the function spawns must not get it
    flags = getattr(socket, "MSG_CMSG_CLOEXEC", 0)  # received descriptors too, from the start (Linux)
    fds, pending = collections.deque(), b""  # descriptors not yet matched with their line
    while True:
        try:
            data, received, _, _ = socket.recv_fds(control, 1 << 16, 16, flags)
        except OSError as exc:
            log("error", "reading the handoff socket", error=str(exc))
            break
        fds.extend(received)
        if not data:
            break
        *lines, pending = (pending + data).split(b"\n")
        for line in lines:
            try:
                msg = json.loads(line).get("msg")
            except (ValueError, AttributeError):
                continue  # not for this wrapper
            if isinstance(msg, dict) and msg.get("sless") == "conn":
                hand_over(server, fds.popleft() if fds else None, msg.get("prefix") or "")
    control.close()
    for fd in fds:
        os.close(fd)


def hand_over(server, fd, prefix):
    """Serves a handed connection on its own thread, like an accepted one."""
    sock = None
    try:
        if fd is None:
            raise ValueError("a handoff line came without a descriptor")
        sock = HandedSocket(fileno=fd)
        sock.set_inheritable(False)
        sock.setblocking(True)  # the gateway's (Go) descriptor comes non-blocking
        sock.prefix = base64.b64decode(prefix)
        addr = sock.getpeername()
    except (OSError, ValueError, TypeError):  # the client left already, or a bad line
        if sock is not None:
            sock.close()
        elif fd is not None:
            os.close(fd)
        log_direct("direct connection closed")  # the pool counted the connection
        return
    server.process_request(sock, addr)


def serve(call):
    Handler.call = staticmethod(call)
    host, port = os.environ.get("SLESS_HOST", "127.0.0.1"), env_int("PORT", 8080)
    server = _Server((host, port), Handler)
    server.daemon_threads = True  # idle keep-alive connections must not block exit
    server.active = set()  # handlers answering an invocation; set.add/discard are atomic
    server.watchdog = Watchdog() if TIMEOUT else None
    handoff = [os.environ.get(k, "") for k in ("SLESS_HANDOFF_FD", "SLESS_FN_PREFIX", "SLESS_GATEWAY_URL")]
    if all(handoff):
        gateway = urlsplit(handoff[2])
        DirectHandler.fn_prefix, DirectHandler.gateway = handoff[1], (gateway.hostname, gateway.port or 80)
        threading.Thread(target=receive_handoffs, args=(server, env_int("SLESS_HANDOFF_FD", 3)), name="handoff",
                         daemon=True).start()

    def on_term(signum, _frame):
        log("info", "shutting down", signal=signum)
        threading.Thread(target=DirectHandler.close_idle, daemon=True).start()
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    log("info", "function listening", addr=f"{host}:{server.server_address[1]}", timeout_seconds=TIMEOUT)
    server.serve_forever()
    deadline = time.monotonic() + SHUTDOWN_GRACE
    while server.active and time.monotonic() < deadline:
        time.sleep(0.02)
    server.server_close()
    flush_logs()


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
    call = load_handler()
    if os.environ.get("SLESS_MODE") == "job":
        code = run_job(call)
        sys.stdout.flush()
        flush_logs()
        os._exit(code)  # abandoned timed-out threads must not keep the job alive
    serve(call)


if __name__ == "__main__":
    main()
