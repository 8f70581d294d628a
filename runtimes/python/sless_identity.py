"""Signed calls (runtimes/README.md): the platform signs every call it makes to the function
with the function's key (SLESS_IDENTITY_KEY). With a key, only the health path is served
without a valid, fresh signature; without one, a call carrying any X-Sless-* header is
refused, as nothing could vouch for it. The signer is rules.Signature (Go); the same vectors
(rules/rulestest/identity.json) hold this verifier and the Go and Node ones equal to it."""
import hashlib
import hmac
import os
import re

KEY_ENV = "SLESS_IDENTITY_KEY"
SIGNATURE = "x-sless-signature"
AHEAD, BEHIND = 5 * 60, 15 * 60  # seconds a signature's time may lie after / before the clock
_PATTERN = re.compile(r"t=([0-9]{1,12}),v1=([0-9a-f]{64})")
_HEX_KEY = re.compile(r"[0-9a-fA-F]{64}")


def load_key(environ=os.environ):
    """The function's key: None without one, b"" when the variable is not 64 hex digits
    (every call is then refused). The variable leaves the environment, so neither the
    handler's children nor a handler that prints its environment pass it on."""
    raw = environ.pop(KEY_ENV, None)
    if raw is None:
        return None
    return bytes.fromhex(raw) if _HEX_KEY.fullmatch(raw) else b""


def refusal(key, method, target, headers, now):
    """Checks a call (its method, request target and (name, value) header pairs as parsed,
    values decoded as ISO-8859-1) against key at now (unix seconds); None lets it through,
    else (status, reason, message)."""
    if key == b"":
        return 500, "badkey", KEY_ENV + " is not 64 hex digits: the function cannot verify its calls"
    platform, seen, signature = [], set(), None
    for name, value in headers:
        lower = name.lower()
        if not lower.startswith("x-sless-"):
            continue
        if lower in seen:
            return 401, "malformed", name + " appears more than once; the platform sends each X-Sless-* header once"
        seen.add(lower)
        if lower == SIGNATURE:
            signature = value
        else:
            platform.append((lower, value.encode("iso-8859-1").strip(b" \t")))
    if key is None:
        if seen:
            return 401, "nokey", "X-Sless-* headers cannot be verified: the function has no " + KEY_ENV
        return None
    if signature is None:
        return 401, "unsigned", "the function takes calls from the sless platform only (its gateway, dispatchers): this one has no X-Sless-Signature"
    m = _PATTERN.fullmatch(signature)
    if m is None:
        return 401, "malformed", "X-Sless-Signature is not t=<unix seconds>,v1=<64 lower-case hex digits>"
    t = int(m.group(1))
    if not -AHEAD <= int(now) - t <= BEHIND:
        return 401, "stale", "X-Sless-Signature is outside its time window (5 minutes ahead, 15 minutes behind the function's clock)"
    signed = b"sless-signature-v1\n%d\n%s\n%s\n" % (t, method.encode("iso-8859-1"), target.partition("?")[0].encode("iso-8859-1"))
    for name, value in sorted(platform, key=lambda p: p[0]):
        signed += name.encode("iso-8859-1") + b":" + value + b"\n"
    if not hmac.compare_digest(hmac.new(key, signed, hashlib.sha256).hexdigest(), m.group(2)):
        return 401, "mismatch", ("X-Sless-Signature does not match the call: an X-Sless-* header, the method or the path changed "
                                 "after the platform signed it, or it was signed for another function")
    return None
