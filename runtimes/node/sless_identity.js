'use strict';
// Signed calls (runtimes/README.md): the platform signs every call it makes to the function
// with the function's key (SLESS_IDENTITY_KEY). With a key, only the health path is served
// without a valid, fresh signature; without one, a call carrying any X-Sless-* header is
// refused, as nothing could vouch for it. The signer is rules.Signature (Go); the same vectors
// (rules/rulestest/identity.json) hold this verifier and the Go and Python ones equal to it.
const crypto = require('node:crypto');

const KEY_ENV = 'SLESS_IDENTITY_KEY';
const AHEAD = 5 * 60; // seconds a signature's time may lie after the clock
const BEHIND = 15 * 60; // and before it (skew plus a cold start's hold)
const PATTERN = /^t=([0-9]{1,12}),v1=([0-9a-f]{64})$/;

// loadKey is the function's key: null without one, an empty Buffer when the variable is not
// 64 hex digits (every call is then refused). The variable leaves the environment, so
// neither the handler's children nor a handler that prints its environment pass it on.
function loadKey(env = process.env) {
  const raw = env[KEY_ENV];
  if (raw === undefined) return null;
  delete env[KEY_ENV];
  return /^[0-9a-fA-F]{64}$/.test(raw) ? Buffer.from(raw, 'hex') : Buffer.alloc(0);
}

// refusal checks a call (its method, raw request target and rawHeaders: names and values
// alternating, as received) against key at now (unix seconds): null lets it through, else
// { status, reason, message }.
function refusal(key, method, target, rawHeaders, now) {
  if (key !== null && key.length === 0) {
    return { status: 500, reason: 'badkey', message: `${KEY_ENV} is not 64 hex digits: the function cannot verify its calls` };
  }
  const platform = [];
  const seen = new Set();
  let signature;
  for (let i = 0; i + 1 < rawHeaders.length; i += 2) {
    const lower = rawHeaders[i].toLowerCase();
    if (!lower.startsWith('x-sless-')) continue;
    if (seen.has(lower)) {
      return { status: 401, reason: 'malformed', message: `${rawHeaders[i]} appears more than once; the platform sends each X-Sless-* header once` };
    }
    seen.add(lower);
    if (lower === 'x-sless-signature') signature = rawHeaders[i + 1];
    else platform.push([lower, rawHeaders[i + 1].replace(/^[ \t]+|[ \t]+$/g, '')]);
  }
  if (key === null) {
    return seen.size > 0 ? { status: 401, reason: 'nokey', message: `X-Sless-* headers cannot be verified: the function has no ${KEY_ENV}` } : null;
  }
  if (signature === undefined) {
    return { status: 401, reason: 'unsigned', message: 'the function takes calls from the sless platform only (its gateway, dispatchers): this one has no X-Sless-Signature' };
  }
  const m = PATTERN.exec(signature);
  if (m === null) {
    return { status: 401, reason: 'malformed', message: 'X-Sless-Signature is not t=<unix seconds>,v1=<64 lower-case hex digits>' };
  }
  const t = Number(m[1]);
  const age = Math.floor(now) - t;
  if (age < -AHEAD || age > BEHIND) {
    return { status: 401, reason: 'stale', message: "X-Sless-Signature is outside its time window (5 minutes ahead, 15 minutes behind the function's clock)" };
  }
  platform.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
  const q = target.indexOf('?');
  let signed = `sless-signature-v1\n${t}\n${method}\n${q < 0 ? target : target.slice(0, q)}\n`;
  for (const [name, value] of platform) signed += `${name}:${value}\n`;
  // Header values arrive decoded as Latin-1: one character per byte sent.
  const mac = crypto.createHmac('sha256', key).update(Buffer.from(signed, 'latin1')).digest();
  if (!crypto.timingSafeEqual(mac, Buffer.from(m[2], 'hex'))) {
    return {
      status: 401, reason: 'mismatch',
      message: 'X-Sless-Signature does not match the call: an X-Sless-* header, the method or the path changed after the platform signed it, or it was signed for another function',
    };
  }
  return null;
}

module.exports = { loadKey, refusal };
