// The sless console: a static page over the /v1 API. The token lives in sessionStorage and is
// sent as a Bearer token; every view is rendered from API answers with DOM APIs (no HTML from
// data except the highlighter's escaped output). What a function answers (the invoke panel)
// and prints (logs) is shown as text only: function content never runs in this origin. Secret
// values only go out (the API answers none); their inputs are emptied once saved or left.
(function () {
  "use strict";
  const $ = (id) => document.getElementById(id);
  const hl = window.slessHighlight;
  const charts = window.slessChart;
  const TABS = ["overview", "invoke", "logs", "source", "invocations", "async", "revisions"];
  const MAX_LOG_LINES = 5000; // the oldest lines leave the page beyond this
  const MAX_BODY_CHARS = 256 * 1024; // an invoke answer is shown up to this
  const POLL_MS = 2000; // status while a build is pending or running; asynchronous invocations until final
  const STATS_REFRESH_MS = 30000;

  // A token in the fragment (#token=…, the URL `sless dev` prints) signs in at once. It leaves
  // the address bar before anything else runs; a fragment never reaches a server or its logs.
  const fragmentToken = takeFragmentToken();

  const state = {
    token: sessionStorage.getItem("sless.token") || "",
    ns: "",
    fn: "", // the function on screen
    before: "",
    view: 0, // bumped on every route: async work of an older view stops drawing
    stops: [], // what to stop when the view changes (streams, timers)
    window: "1h",
    events: {}, // the invoke panel's event per function, kept while the tab lives
    logs: { ctrl: null, autoscroll: true, unseen: 0 },
    follows: 0, // bumped by each invoke: the panel follows only its latest asynchronous call
    notice: "", // what the secrets view says once it is drawn again (saved, deleted)
  };

  function takeFragmentToken() {
    const m = location.hash.match(/^#token=([^&]*)/);
    if (!m) return "";
    history.replaceState(null, "", location.pathname + location.search);
    try {
      return decodeURIComponent(m[1]);
    } catch (e) {
      return m[1];
    }
  }

  class APIError extends Error {
    constructor(status, body) {
      super(body.error || "HTTP " + status);
      this.status = status;
    }
  }

  const authHeaders = (accept) => ({ Authorization: "Bearer " + state.token, Accept: accept });

  async function failed(resp) {
    const data = await resp.json().catch(() => ({}));
    if (resp.status === 401) signOut("Your token was rejected: " + (data.error || "unauthorized"));
    return new APIError(resp.status, data);
  }

  async function call(method, path, body) {
    const opts = { method, headers: authHeaders("application/json") };
    if (body !== undefined) {
      opts.headers["Content-Type"] = "application/json";
      opts.body = JSON.stringify(body);
    }
    const resp = await fetch(path, opts);
    if (!resp.ok) throw await failed(resp);
    return resp.status === 204 ? {} : resp.json().catch(() => ({}));
  }

  // stream reads the NDJSON lines of path (a logs endpoint) into onLine until the server ends
  // the stream or signal aborts it; onOpen runs once the answer has started.
  async function stream(path, signal, onLine, onOpen) {
    const resp = await fetch(path, { headers: authHeaders("application/x-ndjson"), signal, cache: "no-store" });
    if (!resp.ok) throw await failed(resp);
    if (onOpen) onOpen();
    const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
    let buf = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += value;
      let i;
      while ((i = buf.indexOf("\n")) >= 0) {
        const text = buf.slice(0, i);
        buf = buf.slice(i + 1);
        if (!text.trim()) continue;
        let line;
        try {
          line = JSON.parse(text);
        } catch (e) {
          line = { line: text }; // not ours to drop: show it as it came
        }
        onLine(line);
      }
    }
  }

  const nsPath = (...parts) => "/v1/namespaces/" + encodeURIComponent(state.ns) + "/" + parts.map(encodeURIComponent).join("/");

  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") e.className = v;
      else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
      else e.setAttribute(k, v);
    }
    for (const c of children) if (c !== null && c !== undefined) e.append(c);
    return e;
  }

  const badge = (text, cls) => el("span", { class: "badge " + cls }, text);
  const phaseOf = (fn) => fn.status.phase || "Pending";
  const phaseBadge = (fn) => badge(phaseOf(fn), "phase-" + phaseOf(fn));
  const definitions = (rows) => rows.flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, v)]);
  const pad = (n, w) => String(n).padStart(w || 2, "0");

  // clock is a log line's local time as the CLI prints it: 2026-12-01 11:18:23.010.
  function clock(s) {
    const d = new Date(s);
    if (isNaN(d)) return s || "";
    return d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate()) + " " +
      pad(d.getHours()) + ":" + pad(d.getMinutes()) + ":" + pad(d.getSeconds()) + "." + pad(d.getMilliseconds(), 3);
  }

  function logRow(l) {
    const stream = l.stream || "";
    return el("div", { class: "log-line" + (stream === "stderr" ? " stderr" : ""), "data-stream": stream },
      el("span", { class: "log-time" }, clock(l.time)), el("span", { class: "log-instance" }, l.instance || ""),
      el("span", { class: "log-stream" }, stream), el("span", { class: "log-text" }, l.line || ""));
  }

  // onLeave registers what stops when the view changes; leave stops it all.
  const onLeave = (stop) => state.stops.push(stop);
  function leave() {
    for (const stop of state.stops.splice(0)) stop();
    state.view++;
  }

  function show(section) {
    for (const id of ["signin", "functions", "function", "secrets"]) $(id).hidden = id !== section;
    $("signout").hidden = section === "signin";
    $("nav").hidden = section === "signin";
    for (const a of $("nav").children) a.classList.toggle("active", a.dataset.nav === (section === "secrets" ? "secrets" : "functions"));
  }

  function signOut(message) {
    leave();
    sessionStorage.removeItem("sless.token");
    state.token = "";
    state.ns = "";
    $("who").textContent = "";
    $("signin-error").textContent = message || "";
    show("signin");
  }

  async function signIn(token) {
    state.token = token.trim();
    state.ns = "";
    try {
      const id = await call("GET", "/v1/whoami");
      state.ns = id.namespace;
      sessionStorage.setItem("sless.token", state.token);
      $("who").textContent = id.subject + " · " + id.namespace;
      route();
    } catch (e) {
      signOut("Sign-in failed: " + e.message);
    }
  }

  // kinds lists what invokes a function: its triggers' types, and "service" when always on.
  function kinds(fn, triggers) {
    const ks = [...new Set(triggers.filter((t) => t.function === fn.name).map((t) => t.type))].sort();
    if (fn.min_replicas >= 1) ks.push("service");
    return ks;
  }

  async function listView() {
    show("functions");
    $("ns").textContent = state.ns;
    $("list-error").textContent = "";
    const rows = $("function-rows");
    try {
      const [fl, tl] = await Promise.all([call("GET", nsPath("functions")), call("GET", nsPath("triggers"))]);
      rows.replaceChildren(...fl.functions.map((fn) => functionRow(fn, tl.triggers)));
      $("empty").hidden = fl.functions.length > 0;
    } catch (e) {
      $("list-error").textContent = "Could not list functions: " + e.message;
    }
  }

  function functionRow(fn, triggers) {
    const url = fn.status.url ? el("a", { href: fn.status.url, onclick: (e) => e.stopPropagation() }, fn.status.url) : "";
    return el("tr", { class: "clickable", "data-function": fn.name, onclick: () => (location.hash = "#/fn/" + fn.name) },
      el("td", {}, el("a", { href: "#/fn/" + fn.name }, fn.name)),
      el("td", {}, fn.runtime),
      el("td", {}, ...kinds(fn, triggers).map((k) => badge(k, "kind-" + k))),
      el("td", {}, phaseBadge(fn), fn.status.last_build_error ? el("span", { class: "error", title: fn.status.last_build_error }, " build failed") : null),
      el("td", {}, url));
  }

  // functionView shows one function with one of its tabs; each tab loads its own data.
  async function functionView(name, tab, arg) {
    const gen = state.view;
    show("function");
    state.fn = name;
    $("fn-name").textContent = name;
    $("fn-phase").replaceChildren();
    $("fn-error").textContent = "";
    for (const a of $("fn-tabs").children) {
      a.href = "#/fn/" + name + (a.dataset.tab === "overview" ? "" : "/" + a.dataset.tab);
      a.classList.toggle("active", a.dataset.tab === tab);
    }
    for (const t of TABS) $("tab-" + t).hidden = true;
    let fn;
    try {
      fn = await call("GET", nsPath("functions", name));
    } catch (e) {
      if (gen === state.view) $("fn-error").textContent = "Could not load function " + name + ": " + e.message;
      return;
    }
    if (gen !== state.view) return;
    $("fn-phase").replaceChildren(phaseBadge(fn));
    $("tab-" + tab).hidden = false;
    ({ overview, invoke: invokeTab, logs: logsTab, source, invocations, async: asyncTab, revisions: revisionsTab })[tab](fn, gen, arg);
  }

  function overview(fn, gen) {
    const meta = [["Runtime", fn.runtime], ["Entrypoint", fn.entrypoint || "(default)"],
      ["Memory", fn.memory_mb + " MiB"], ["Timeout", fn.timeout_sec ? fn.timeout_sec + " s" : "none"],
      ["Replicas", fn.min_replicas + "–" + fn.max_replicas], ["URL", fn.status.url || "—"], ["Image", fn.status.image || "—"],
      ["Protocol", fn.protocol || "http1"], ...asyncSettings(fn)];
    $("fn-meta").replaceChildren(...definitions(meta));
    secretRefs(fn, gen);
    build(fn, gen);
    stats(fn.name, gen);
    const timer = setInterval(() => stats(fn.name, gen), STATS_REFRESH_MS);
    onLeave(() => clearInterval(timer));
    triggers(fn.name);
  }

  // asyncSettings are the overview's rows for the function's asynchronous invocations.
  function asyncSettings(fn) {
    const a = fn.async || {};
    if (!a.enabled) return [["Async", "off (Prefer: respond-async answers 409)"]];
    const n = a.max_attempts || 1;
    return [["Async", "on"],
      ["Attempts", n + (n === 1 ? " (no retry)" : " (" + (n - 1) + (n === 2 ? " retry" : " retries") + " after a failure)")],
      ["Backoff", a.backoff_ms ? duration(a.backoff_ms) + " before the 2nd attempt, doubling for each next one" : "none: retries at once"],
      ["Dead-letter queue", a.dead_letter_queue || state.ns + ".async." + fn.name + ".dlq (the default)"]];
  }

  const duration = (ms) => (ms < 1000 ? ms + " ms" : +(ms / 1000).toFixed(3) + " s");

  // build shows the build's status and its own output, followed while the build runs; while
  // one is pending or running the status is polled and the view redrawn when it moves on.
  function build(fn, gen) {
    const st = fn.status, phase = phaseOf(fn);
    const rows = [["Phase", phaseBadge(fn)]];
    if (st.message) rows.push(["Message", st.message]);
    if (st.last_build_time) rows.push(["Last build", new Date(st.last_build_time).toLocaleString()]);
    $("build-status").replaceChildren(...definitions(rows));
    const be = $("fn-build-error");
    be.hidden = !st.last_build_error;
    be.textContent = st.last_build_error ? "Build failed:\n" + st.last_build_error : "";

    const log = $("build-log");
    log.replaceChildren();
    log.dataset.state = "loading";
    const follow = phase === "Building";
    log.dataset.follow = String(follow);
    const ctrl = new AbortController();
    onLeave(() => ctrl.abort());
    let lines = 0;
    const q = "?tail=1000" + (follow ? "&follow=true" : "");
    stream(nsPath("functions", fn.name, "builds", "latest", "logs") + q, ctrl.signal, (l) => {
      if (!lines++) log.replaceChildren();
      log.append(logRow(l));
      log.scrollTop = log.scrollHeight;
    }).then(() => {
      if (gen !== state.view) return;
      log.dataset.state = "done";
      if (!lines) log.replaceChildren(el("span", { class: "muted" }, "No build output."));
    }).catch((e) => {
      if (ctrl.signal.aborted || gen !== state.view) return;
      log.dataset.state = "error";
      log.replaceChildren(el("span", { class: "error" }, e.status === 404 ? "No build yet." : "Could not read the build log: " + e.message));
    });
    if (follow) log.append(el("span", { class: "muted" }, "Waiting for the build's output…"));

    if (phase !== "Building" && phase !== "Pending") return;
    const timer = setInterval(async () => {
      let now;
      try {
        now = await call("GET", nsPath("functions", fn.name));
      } catch (e) {
        return; // the next tick tries again
      }
      if (gen === state.view && (phaseOf(now) !== phase || now.status.message !== st.message)) route();
    }, POLL_MS);
    onLeave(() => clearInterval(timer));
  }

  async function stats(name, gen) {
    for (const b of $("stats-windows").children) b.classList.toggle("active", b.dataset.window === state.window);
    let st;
    try {
      st = await call("GET", nsPath("functions", name, "stats") + "?window=" + encodeURIComponent(state.window));
    } catch (e) {
      if (gen !== state.view) return;
      $("stats-error").textContent = "Charts unavailable: " + e.message;
      for (const id of ["chart-invocations", "chart-errors", "chart-duration"]) $(id).replaceChildren();
      $("stats-total").textContent = "";
      return;
    }
    if (gen !== state.view) return;
    $("stats-error").textContent = "";
    const per = st.bucket_sec / 60;
    $("chart-invocations-title").textContent = "Invocations per minute" + (per > 1 ? " (average over " + per + " minutes)" : "");
    charts.invocations($("chart-invocations"), st);
    charts.errors($("chart-errors"), st);
    charts.duration($("chart-duration"), st);
    const t = st.total;
    $("stats-total").textContent = t.count + (t.count === 1 ? " invocation" : " invocations") +
      (t.count ? ", " + t.errors + " failed (" + ((100 * t.errors) / t.count).toFixed(1) + "%), p50 " + charts.ms(t.p50_ms) + ", p95 " + charts.ms(t.p95_ms) : "");
  }

  async function triggers(name) {
    $("trigger-rows").replaceChildren();
    $("trigger-error").textContent = "";
    try {
      const tl = await call("GET", nsPath("triggers"));
      $("trigger-rows").replaceChildren(...tl.triggers.filter((t) => t.function === name).map(triggerRow));
    } catch (e) {
      $("trigger-error").textContent = "Could not list triggers: " + e.message;
    }
  }

  // A trigger's row: its summary is the API's status.source (its kind's words: URL, schedule
  // or queue), so the console names no kind.
  function triggerRow(t) {
    const button = el("button", { "data-trigger": t.name, onclick: () => toggle(t, button) }, t.enabled ? "Disable" : "Enable");
    return el("tr", { "data-trigger-row": t.name },
      el("td", {}, t.name), el("td", {}, badge(t.type, "kind-" + t.type)), el("td", {}, t.status.source || ""),
      el("td", { class: t.enabled ? "state-on" : "state-off" }, t.enabled ? "enabled" : "disabled"), el("td", {}, button));
  }

  // The revisions tab: each revision of the function newest first, its share of the traffic
  // and tags, and the rollback: all traffic to one revision in one step.
  async function revisionsTab(fn, gen) {
    $("revisions-error").textContent = "";
    $("traffic-line").textContent = "Traffic: " + (fn.status.traffic || []).map((t) =>
      (t.revision || "latest") + (t.latest && t.revision ? " (latest)" : "") + " " + t.percent + "%" + (t.tag ? " tag " + t.tag : "")).join(", ");
    const ro = fn.status.rollout;
    $("rollout-line").textContent = ro ? "Rollout " + ro.phase.replace("_", " ") + ": " + ro.message : "";
    $("rollback").onclick = () => rollback(fn.name, "");
    let list;
    try {
      list = await call("GET", nsPath("functions", fn.name, "revisions"));
    } catch (e) {
      if (gen === state.view) $("revisions-error").textContent = "Could not list revisions: " + e.message;
      return;
    }
    if (gen !== state.view) return;
    $("revision-rows").replaceChildren(...list.revisions.slice().reverse().map((r) => revisionRow(fn.name, r)));
  }

  function revisionRow(name, r) {
    const src = r.config.source ? "sha256:" + r.config.source.sha256.slice(0, 12) : r.config.image || "";
    const button = r.status.phase === "ready" && r.percent < 100
      ? el("button", { "data-revision": r.name, onclick: () => rollback(name, r.name) }, "Send all traffic here") : null;
    return el("tr", { "data-revision-row": r.name },
      el("td", {}, r.name), el("td", {}, badge(r.status.phase, "revision-" + r.status.phase)), el("td", {}, r.percent + "%"),
      el("td", {}, r.tags.join(", ")), el("td", {}, src), el("td", {}, new Date(r.created_at).toLocaleString()),
      el("td", {}, r.status.message || ""), el("td", {}, button));
  }

  // rollback sends all traffic to revision to ("": the server's default) and redraws once the
  // revisions show it (the route changes right after the answer).
  async function rollback(name, to) {
    const gen = state.view;
    let fn;
    try {
      fn = await call("POST", nsPath("functions", name, "rollback"), to ? { to } : {});
    } catch (e) {
      $("revisions-error").textContent = "Could not roll back: " + e.message;
      return;
    }
    const target = fn.traffic[0].revision;
    for (let i = 0; i < 40 && gen === state.view; i++) {
      const list = await call("GET", nsPath("functions", name, "revisions")).catch(() => null);
      if (list && list.revisions.some((r) => r.name === target && r.percent === 100)) break;
      await new Promise((done) => setTimeout(done, 100));
    }
    if (gen === state.view) route();
  }

  async function toggle(t, button) {
    button.disabled = true;
    try {
      const updated = await call("PATCH", nsPath("triggers", t.name), { enabled: !t.enabled });
      button.closest("tr").replaceWith(triggerRow(updated));
    } catch (e) {
      $("trigger-error").textContent = "Could not change " + t.name + ": " + e.message;
      button.disabled = false;
    }
  }

  // The invoke panel: the event goes to /fn/ exactly as a caller's would (same origin, so the
  // answer is readable; the gateway strips the token before the function). The answer is
  // shown as text, never parsed as HTML; one without a length (a stream: chunked, Server-Sent
  // Events) is shown as it arrives, until it ends or the panel invokes again or is left.
  const fnURL = (name) => "/fn/" + encodeURIComponent(state.ns) + "/" + encodeURIComponent(name);

  function invokeTab(fn) {
    $("invoke-url").textContent = location.origin + fnURL(fn.name);
    if (!(fn.name in state.events)) state.events[fn.name] = "{}";
    $("event").value = state.events[fn.name];
    $("invoke-error").textContent = "";
    $("invoke-result").hidden = true;
    $("invoke-invocation").replaceChildren();
    const on = !!(fn.async && fn.async.enabled);
    $("invoke-queue").disabled = !on;
    if (!on) $("invoke-queue").checked = false;
    $("invoke-queue-note").textContent = on ? "" : "(off for this function: async.enabled)";
  }

  async function invoke() {
    const name = state.fn, gen = state.view, text = $("event").value;
    state.events[name] = text;
    $("invoke-error").textContent = "";
    try {
      JSON.parse(text);
    } catch (e) {
      $("invoke-error").textContent = "The event is not valid JSON (" + e.message + "); fix it and invoke again. Nothing was sent.";
      return;
    }
    const button = $("invoke-send"), queue = $("invoke-queue").checked && !$("invoke-queue").disabled;
    const follow = ++state.follows;
    $("invoke-invocation").replaceChildren();
    button.disabled = true;
    const t0 = performance.now();
    let resp;
    try {
      const headers = { "Content-Type": "application/json", Authorization: "Bearer " + state.token };
      if (queue) headers.Prefer = "respond-async";
      resp = await fetch(fnURL(name), { method: "POST", body: text, redirect: "manual", cache: "no-store", credentials: "omit", headers });
    } catch (e) {
      if (gen === state.view) $("invoke-error").textContent = "The call to " + name + " did not complete: " + e.message;
      return;
    } finally {
      button.disabled = false;
    }
    const firstByte = performance.now() - t0;
    if (gen !== state.view) return;
    if (resp.type === "opaqueredirect") {
      $("invoke-status").replaceChildren(badge("redirect", "phase-Pending"), " the function answered with a redirect; the console does not follow it");
    } else {
      $("invoke-status").replaceChildren(badge(resp.status + (resp.statusText ? " " + resp.statusText : ""), resp.ok ? "phase-Ready" : "phase-Failed"));
    }
    $("invoke-status").dataset.status = String(resp.status);
    const cold = resp.headers.get("X-Sless-Cold-Start");
    $("invoke-cold").dataset.cold = cold || "";
    $("invoke-cold").textContent = cold === "true" ? "yes: waited for an instance to start" : cold === "false" ? "no" : "not reported";
    $("invoke-revision").textContent = resp.headers.get("X-Sless-Revision") || "—";
    const type = resp.headers.get("Content-Type") || "";
    $("invoke-type").textContent = type || "—";
    const out = $("invoke-body");
    out.textContent = "";
    $("invoke-result").hidden = false;
    const live = () => gen === state.view && follow === state.follows;
    let body = "";
    if (resp.type !== "opaqueredirect" && resp.body && !resp.headers.has("Content-Length")) {
      out.dataset.streaming = "true";
      $("invoke-duration").textContent = "first byte after " + firstByte.toFixed(1) + " ms · streaming…";
      const reader = resp.body.getReader(), decoder = new TextDecoder();
      try {
        for (;;) {
          const { done, value } = await reader.read();
          if (!live()) {
            reader.cancel();
            return;
          }
          if (done) break;
          const chunk = decoder.decode(value, { stream: true });
          // Shown up to the cap; what comes after is read and counted, not kept.
          if (body.length < MAX_BODY_CHARS) out.append(chunk.slice(0, MAX_BODY_CHARS - body.length));
          body += body.length < MAX_BODY_CHARS ? chunk : "";
        }
      } catch (e) {
        if (live()) $("invoke-error").textContent = "The stream from " + name + " broke off before its end: " + e.message;
      }
      out.dataset.streaming = "false";
      if (!body) out.textContent = "(empty body)";
      $("invoke-duration").textContent = (performance.now() - t0).toFixed(1) + " ms (round trip from this browser; streamed, first byte after " + firstByte.toFixed(1) + " ms)";
      return;
    }
    try {
      body = resp.type === "opaqueredirect" ? "" : await resp.text();
    } catch (e) {
      if (live()) $("invoke-error").textContent = "The answer from " + name + " broke off: " + e.message;
      return;
    }
    if (!live()) return;
    out.dataset.streaming = "false";
    out.textContent = shown(body, type);
    $("invoke-duration").textContent = (performance.now() - t0).toFixed(1) + " ms (round trip from this browser)";
    const id = queue && (resp.status === 202 || resp.status === 200) ? resp.headers.get("X-Sless-Invocation-Id") || "" : "";
    if (/^[0-9a-f]{24}$/.test(id)) followInvocation(name, id, gen, follow);
  }

  // followInvocation shows the invoke panel's asynchronous call as it proceeds, polled until
  // it is final, the panel invokes again or the view changes.
  async function followInvocation(name, id, gen, follow) {
    const box = $("invoke-invocation");
    const live = () => gen === state.view && follow === state.follows;
    let timer = 0;
    onLeave(() => clearTimeout(timer));
    const tick = async () => {
      let inv;
      try {
        inv = await call("GET", nsPath("invocations", id));
      } catch (e) {
        if (live()) box.replaceChildren(el("p", { class: "error" }, "Could not read invocation " + id + ": " + e.message));
        return;
      }
      if (!live()) return;
      box.replaceChildren(el("h3", {}, "Invocation ", el("a", { href: "#/fn/" + name + "/async/" + id }, el("code", {}, id)),
        el("span", { class: "muted" }, finalStatus(inv) ? "" : " · following")), invocationDetail(inv));
      if (!finalStatus(inv)) timer = setTimeout(tick, POLL_MS / 2);
    };
    tick();
  }

  // shown is an answer as the panel prints it: JSON indented, anything capped.
  function shown(body, type) {
    if (/json/i.test(type)) {
      try {
        body = JSON.stringify(JSON.parse(body), null, 2);
      } catch (e) {
        // not JSON after all: as it came
      }
    }
    if (body.length > MAX_BODY_CHARS) return body.slice(0, MAX_BODY_CHARS) + "\n… (" + (body.length - MAX_BODY_CHARS) + " more characters not shown)";
    return body || "(empty body)";
  }

  // The logs tab follows what the function's instances print until stopped or left.
  function logsTab(fn, gen) {
    state.logs.autoscroll = true;
    state.logs.unseen = 0;
    tail(fn.name, gen);
  }

  function tail(name, gen) {
    const box = $("logs"), lg = state.logs;
    if (lg.ctrl) lg.ctrl.abort();
    box.replaceChildren();
    $("logs-error").textContent = "";
    const ctrl = new AbortController();
    lg.ctrl = ctrl;
    onLeave(() => ctrl.abort());
    following(true, "waiting for lines…");
    const since = $("logs-since").value;
    const q = "?follow=true&tail=" + encodeURIComponent($("logs-tail").value) + (since ? "&since=" + encodeURIComponent(since) : "");
    stream(nsPath("functions", name, "logs") + q, ctrl.signal, (l) => {
      box.append(logRow(l));
      while (box.childElementCount > MAX_LOG_LINES) box.firstElementChild.remove();
      if (lg.autoscroll) box.scrollTop = box.scrollHeight;
      else lg.unseen++;
      pauseLabel();
    }, () => following(true, "following")).then(() => {
      if (gen === state.view && lg.ctrl === ctrl) following(false, "the gateway ended the stream");
    }).catch((e) => {
      if (ctrl.signal.aborted || gen !== state.view) return;
      following(false, "stopped");
      $("logs-error").textContent = "Could not follow the logs of " + name + ": " + e.message;
    });
  }

  function following(on, text) {
    $("logs-follow").textContent = on ? "Stop" : "Follow";
    $("logs-follow").dataset.following = String(on);
    $("logs-state").textContent = text;
    $("logs").dataset.state = text;
  }

  function pauseLabel() {
    const lg = state.logs;
    $("logs-pause").textContent = lg.autoscroll ? "Pause scrolling" : "Resume scrolling" + (lg.unseen ? " (" + lg.unseen + " new)" : "");
  }

  function setAutoscroll(on) {
    const lg = state.logs, box = $("logs");
    lg.autoscroll = on;
    if (on) {
      lg.unseen = 0;
      box.scrollTop = box.scrollHeight;
    }
    pauseLabel();
  }

  async function source(fn) {
    $("source-tabs").replaceChildren();
    $("source-code").textContent = "";
    let src;
    try {
      src = await call("GET", nsPath("functions", fn.name, "source"));
    } catch (e) {
      $("source-code").textContent = e.status === 404 ? "No source uploaded yet." : "Could not load the source: " + e.message;
      return;
    }
    const open = (f, button) => {
      for (const b of $("source-tabs").children) b.classList.toggle("active", b === button);
      const code = $("source-code");
      if (f.omitted) code.textContent = "(" + f.omitted + ", " + f.size + " bytes)";
      else code.innerHTML = hl.highlight(f.content || "", f.name); // escaped by the highlighter
    };
    const buttons = src.files.map((f) => {
      const b = el("button", { "data-file": f.name }, f.name);
      b.addEventListener("click", () => open(f, b));
      return b;
    });
    $("source-tabs").replaceChildren(...buttons);
    // Start on the first file the highlighter knows (the code, not a README).
    const first = Math.max(0, src.files.findIndex((f) => hl.languageOf(f.name) !== "" && !f.omitted));
    if (src.files.length) open(src.files[first], buttons[first]);
  }

  async function invocations(fn, gen, more) {
    const name = fn.name;
    const q = "?limit=20" + (more && state.before ? "&before=" + encodeURIComponent(state.before) : "");
    if (!more) {
      state.before = "";
      $("invocation-rows").replaceChildren();
      $("older").hidden = true;
    }
    let page;
    try {
      page = await call("GET", nsPath("functions", name, "invocations") + q);
    } catch (e) {
      $("invocation-rows").replaceChildren(el("tr", {}, el("td", { colspan: "8", class: "error" }, "History unavailable: " + e.message)));
      return;
    }
    if (gen !== state.view) return;
    const rows = page.invocations.map((i) => el("tr", { "data-invocation": String(i.id), "data-cold-start": String(!!i.cold_start) },
      el("td", {}, new Date(i.start).toLocaleString()), el("td", {}, badge(i.kind, "kind-" + i.kind)),
      el("td", {}, badge(i.status, i.status === "succeeded" ? "phase-Ready" : "phase-Failed")),
      el("td", {}, i.http_status ? String(i.http_status) : ""),
      el("td", i.ttfb_ms ? { title: "first byte after " + i.ttfb_ms.toFixed(1) + " ms; " + (i.bytes_sent || 0) + " bytes sent" } : {},
        i.duration_ms.toFixed(1) + " ms"),
      el("td", {}, i.cold_start ? badge("cold", "cold") : "", i.streamed ? badge("stream", "stream") : ""),
      el("td", {}, i.error || ""), el("td", {}, el("code", {}, (i.trace_id || "").slice(0, 16)))));
    if (more) $("invocation-rows").append(...rows);
    else $("invocation-rows").replaceChildren(...rows);
    if (!more && !rows.length) $("invocation-rows").append(el("tr", {}, el("td", { colspan: "8" }, "No invocations recorded yet.")));
    state.before = page.next || "";
    $("older").hidden = !state.before;
  }

  // The async tab: the function's asynchronous invocations (newest first) and, at
  // #/fn/<name>/async/<id>, one of them; polled while any shown is not final.
  const finalStatus = (inv) => inv.status === "succeeded" || inv.status === "failed";
  const asyncBadge = (s) => badge(s, s === "succeeded" ? "phase-Ready" : s === "failed" ? "phase-Failed" : s === "running" ? "phase-Building" : "phase-Pending");
  const when = (s) => (s ? new Date(s).toLocaleString() : "—");

  function asyncTab(fn, gen, id) {
    const name = fn.name;
    $("async-note").textContent = fn.async && fn.async.enabled ? "" :
      "Asynchronous invocations are off for " + name + " (async.enabled); calls made while they were on are still listed.";
    $("async-error").textContent = "";
    $("async-rows").replaceChildren();
    $("async-detail").hidden = !id;
    $("async-detail").replaceChildren();
    asyncState("loading");
    let timer = 0;
    onLeave(() => clearTimeout(timer));
    const tick = async () => {
      let list, one;
      try {
        [list, one] = await Promise.all([call("GET", nsPath("invocations") + "?limit=50&function=" + encodeURIComponent(name)),
          id ? call("GET", nsPath("invocations", id)) : null]);
      } catch (e) {
        if (gen !== state.view) return;
        asyncState("stopped");
        $("async-error").textContent = e.status === 501 ? "This platform has no asynchronous invocations (no broker and database for them)."
          : "Could not list the asynchronous invocations" + (id ? " or read " + id : "") + ": " + e.message;
        return;
      }
      if (gen !== state.view) return;
      const invs = list.invocations || [];
      $("async-rows").replaceChildren(...invs.map((i) => asyncRow(name, i, id)));
      if (!invs.length) $("async-rows").append(el("tr", {}, el("td", { colspan: "7" }, "No asynchronous invocations of " + name + " yet.")));
      if (one) {
        $("async-detail").dataset.status = one.status;
        $("async-detail").replaceChildren(el("h2", {}, "Invocation ", el("code", {}, one.id)), invocationDetail(one));
      }
      const open = invs.some((i) => !finalStatus(i)) || (one && !finalStatus(one));
      asyncState(open ? "following" : "all final");
      if (open) timer = setTimeout(tick, POLL_MS);
    };
    tick();
  }

  function asyncState(text) {
    $("async-state").textContent = text;
    $("tab-async").dataset.state = text;
  }

  function asyncRow(name, i, selected) {
    const href = "#/fn/" + name + "/async/" + i.id;
    const err = i.error || "";
    return el("tr", { class: "clickable" + (i.id === selected ? " selected" : ""), "data-async": i.id, "data-status": i.status,
      onclick: () => (location.hash = href) },
      el("td", {}, el("a", { href }, el("code", {}, i.id))), el("td", {}, asyncBadge(i.status)),
      el("td", { class: "attempts" }, i.attempts + " / " + i.max_attempts), el("td", {}, when(i.created_at)),
      el("td", { class: "finished" }, finalStatus(i) ? when(i.updated_at) : "—"), el("td", {}, i.http_status ? String(i.http_status) : ""),
      el("td", { class: "error", title: err }, err.length > 120 ? err.slice(0, 120) + "…" : err));
  }

  // invocationDetail is one asynchronous invocation: its figures, the latest attempt's error
  // and its result, all as text (the result is what the function answered).
  function invocationDetail(inv) {
    const fin = finalStatus(inv);
    const rows = [["Status", asyncBadge(inv.status)], ["Attempts", inv.attempts + " of " + inv.max_attempts],
      ["Created", when(inv.created_at)], [fin ? "Finished" : "Updated", when(inv.updated_at)]];
    if (inv.http_status) rows.push(["HTTP status", String(inv.http_status)]);
    if (inv.attempts) rows.push(["Cold start", inv.cold_start ? "yes" : "no"]);
    if (inv.content_type) rows.push(["Content type", inv.content_type]);
    if (inv.idempotency_key) rows.push(["Idempotency key", inv.idempotency_key]);
    const out = el("div", { class: "invocation", "data-status": inv.status }, el("dl", {}, ...definitions(rows)));
    if (inv.error) {
      out.append(el("pre", { class: "build-error invocation-error" },
        (inv.status === "failed" ? "Failed after " + inv.attempts + (inv.attempts === 1 ? " attempt" : " attempts") + ", dead-lettered:\n"
          : "The latest attempt failed" + (fin ? "" : "; it is retried") + ":\n") + inv.error));
    }
    let result = fin || inv.result ? "" : "(no result yet)";
    if (inv.result) {
      result = inv.result_base64 ? "(binary, base64)\n" + shown(inv.result, "") : shown(inv.result, inv.content_type || "");
      if (inv.result_truncated) result += "\n… (the platform keeps the first 256 KiB of a result)";
    } else if (inv.status === "succeeded") result = "(empty body)";
    if (result) out.append(el("pre", { class: "code invocation-result" }, result));
    return out;
  }

  // The secrets view (#/secrets): the namespace's secrets by name, keys and version, and a
  // form that creates one or, at #/secrets/<name>, rotates one. Values go out and never come
  // back: the API answers no value, the inputs are write-only (password fields, or a
  // multi-line field on request, never autofilled nor spellchecked) and are emptied once saved
  // and whenever the view is left. A rotation (PUT) replaces all the data, and the old values
  // cannot be read back, so its form asks for every key's value again.
  const SECRET_KEY_RE = /^[-._a-zA-Z0-9]{1,253}$/;

  async function secretsView(editing) {
    const gen = state.view;
    show("secrets");
    $("secrets-ns").textContent = state.ns;
    $("secrets-notice").textContent = state.notice;
    state.notice = "";
    $("secrets-error").textContent = "";
    onLeave(() => {
      clearSecretValues();
      delete $("secrets").dataset.state;
    });
    secretForm(null);
    $("secret-form").hidden = !!editing; // until the secret to rotate is known
    $("secrets").dataset.state = "loading";
    $("secret-rows").replaceChildren(); // not an older view's rows, nor their buttons
    $("secrets-empty").hidden = true;
    let list;
    try {
      list = await call("GET", nsPath("secrets"));
    } catch (e) {
      if (gen !== state.view) return;
      $("secrets").dataset.state = "error";
      $("secrets-error").textContent = "Could not list secrets: " + e.message;
      return;
    }
    if (gen !== state.view) return;
    const secrets = list.secrets || [];
    $("secret-rows").replaceChildren(...secrets.map((s) => secretRow(s, editing)));
    $("secrets-empty").hidden = secrets.length > 0;
    $("secret-form").hidden = false;
    $("secrets").dataset.state = "loaded";
    if (!editing) return;
    const s = secrets.find((x) => x.name === editing);
    if (s) secretForm(s);
    else $("secrets-error").textContent = "There is no secret " + editing + " in " + state.ns + "; create it below.";
  }

  function secretRow(s, editing) {
    return el("tr", { "data-secret": s.name, class: s.name === editing ? "selected" : "" },
      el("td", {}, el("a", { href: "#/secrets/" + encodeURIComponent(s.name) }, s.name)),
      el("td", { class: "keys" }, ...(s.keys || []).map((k) => el("code", { class: "key" }, k))),
      el("td", { class: "version" }, String(s.version)),
      el("td", { class: "updated" }, when(s.updated_at)),
      el("td", { class: "actions" }, el("button", { "data-rotate": s.name, onclick: () => (location.hash = "#/secrets/" + encodeURIComponent(s.name)) }, "Rotate…"),
        " ", deleteSecretButton(s)));
  }

  // deleteSecretButton deletes on a second click within 5 s; the server refuses (409, with
  // the functions and triggers that use the secret) while it is referenced.
  function deleteSecretButton(s) {
    const b = el("button", { class: "danger", "data-delete": s.name }, "Delete");
    let timer = 0;
    const disarm = () => {
      clearTimeout(timer);
      delete b.dataset.armed;
      b.textContent = "Delete";
    };
    b.addEventListener("click", async () => {
      if (!b.dataset.armed) {
        b.dataset.armed = "true";
        b.textContent = "Delete " + s.name + "? Click again";
        timer = setTimeout(disarm, 5000);
        return;
      }
      disarm();
      const gen = state.view;
      b.disabled = true;
      $("secrets-notice").textContent = "";
      $("secrets-error").textContent = "";
      try {
        await call("DELETE", nsPath("secrets", s.name));
      } catch (e) {
        if (gen !== state.view) return;
        $("secrets-error").textContent = "Could not delete " + s.name + ": " + e.message;
        b.disabled = false;
        return;
      }
      if (gen === state.view) secretsSaved("Deleted " + s.name + ".");
    });
    return b;
  }

  // secretsSaved shows the list again, fresh, with notice above it.
  function secretsSaved(notice) {
    state.notice = notice;
    if (location.hash === "#/secrets") route();
    else location.hash = "#/secrets";
  }

  // secretForm sets the form up to create a secret (s null) or to rotate s: one row per key
  // of s, each with an empty value.
  function secretForm(s) {
    clearSecretValues();
    const rotate = !!s;
    const form = $("secret-form");
    form.dataset.mode = rotate ? "rotate" : "create";
    form.dataset.secret = rotate ? s.name : "";
    $("secret-form-title").textContent = rotate ? "Rotate " + s.name : "New secret";
    const note = $("secret-form-note");
    if (rotate) {
      note.replaceChildren(el("strong", {}, "All values are replaced: enter every key."),
        " The current values cannot be read back, so a key left out is dropped; remove the keys you no longer want. Saving makes version " +
        (s.version + 1) + " and the functions that use " + s.name + " roll to the new values.");
    } else {
      note.textContent = "Values are sent once and never shown again, here or by the API.";
    }
    $("secret-name-row").hidden = rotate;
    $("secret-name").value = "";
    $("secret-keys").replaceChildren(...(rotate ? s.keys.map((k) => secretKeyRow(k)) : [secretKeyRow("")]));
    $("secret-save").textContent = rotate ? "Rotate to version " + (s.version + 1) : "Create secret";
    $("secret-save").disabled = false;
    $("secret-cancel").hidden = !rotate;
    $("secret-form-error").textContent = "";
  }

  // secretKeyRow is a row of the form: an existing key (fixed) or a new one (its name typed),
  // with a write-only value.
  function secretKeyRow(key) {
    const value = secretValueInput(false, key);
    const row = el("tr", { class: "secret-key-row" },
      el("td", {}, key ? el("code", { class: "key" }, key)
        : el("input", { type: "text", class: "secret-key", "aria-label": "Key", placeholder: "KEY", autocomplete: "off", spellcheck: "false", autocapitalize: "off" })),
      el("td", { class: "secret-value-cell" }, value),
      el("td", { class: "row-actions" }));
    if (key) row.dataset.key = key;
    const multi = el("button", { type: "button", class: "secret-multiline", title: "Edit this value in a multi-line field (shown while you type)" }, "Multi-line");
    multi.addEventListener("click", () => {
      const old = row.querySelector(".secret-value");
      const area = secretValueInput(true, key);
      area.value = old.value;
      old.value = "";
      old.replaceWith(area);
      multi.remove();
      area.focus();
    });
    const remove = el("button", { type: "button", class: "secret-remove" }, "Remove");
    remove.addEventListener("click", () => {
      row.querySelector(".secret-value").value = "";
      row.remove();
    });
    row.lastChild.append(multi, " ", remove);
    return row;
  }

  function secretValueInput(multiline, key) {
    const attrs = { class: "secret-value", "aria-label": key ? "New value of " + key : "Value", autocomplete: multiline ? "off" : "new-password",
      spellcheck: "false", autocapitalize: "off", autocorrect: "off", "data-lpignore": "true", "data-1p-ignore": "true" };
    return multiline ? el("textarea", { ...attrs, rows: "4" }) : el("input", { ...attrs, type: "password", placeholder: key ? "new value" : "value" });
  }

  function clearSecretValues() {
    for (const v of document.querySelectorAll("#secret-form .secret-value")) v.value = "";
  }

  async function saveSecret(e) {
    e.preventDefault();
    const gen = state.view, form = $("secret-form"), rotate = form.dataset.mode === "rotate";
    const name = rotate ? form.dataset.secret : $("secret-name").value.trim();
    const fail = (msg) => {
      $("secret-form-error").textContent = msg;
    };
    $("secret-form-error").textContent = "";
    $("secrets-notice").textContent = "";
    if (!rotate && !/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/.test(name)) {
      return fail(name ? name + " is not a valid name: use lowercase letters, digits and '-', starting and ending with a letter or digit." : "Enter the secret's name.");
    }
    const data = {};
    for (const row of $("secret-keys").children) {
      const key = row.dataset.key || row.querySelector(".secret-key").value.trim();
      const value = row.querySelector(".secret-value").value;
      if (!key && !value) continue; // an empty new row
      if (!key) return fail("A value has no key: name it, or remove its row.");
      if (!SECRET_KEY_RE.test(key) || key === "." || key === "..") return fail(key + " is not a valid key: use letters, digits, '-', '_' and '.'.");
      if (key in data) return fail("The key " + key + " is given twice.");
      if (!value) {
        return fail("Enter a value for " + key + (rotate ? ": a rotation replaces every value, so each key needs its value again (or remove the key to drop it)." : "."));
      }
      data[key] = value;
    }
    if (!Object.keys(data).length) return fail(rotate ? "A secret keeps at least one key: enter the value of each key you keep." : "Add at least one key and its value.");
    const button = $("secret-save");
    button.disabled = true;
    let s;
    try {
      s = rotate ? await call("PUT", nsPath("secrets", name), { data }) : await call("POST", nsPath("secrets"), { name, data });
    } catch (err) {
      if (gen === state.view) fail("Could not " + (rotate ? "rotate " : "create ") + name + ": " + err.message);
      return; // the values stay for another try
    } finally {
      button.disabled = false;
    }
    clearSecretValues();
    if (gen !== state.view) return;
    const keys = (s.keys || []).join(", ");
    secretsSaved(rotate ? "Rotated " + s.name + " to version " + s.version + " (keys " + keys + "); the functions that use it roll to the new values."
      : "Created " + s.name + " (version " + s.version + ", keys " + keys + ").");
  }

  // secretRefs shows the function's secret references by name (never a value), each marked
  // when its secret or key does not exist.
  async function secretRefs(fn, gen) {
    const env = fn.secret_env || [], files = fn.secret_files || [], box = $("fn-secrets");
    if (!env.length && !files.length) {
      box.replaceChildren(el("p", { class: "muted" }, "None: the function uses no secret (secret_env, secret_files)."));
      return;
    }
    const draw = (known) => {
      const missing = (secret, key) => {
        const s = known && known.get(secret);
        if (!known) return null;
        if (!s) return badge("no such secret", "phase-Failed");
        if (key !== undefined && !s.keys.includes(key)) return badge("no key " + key, "phase-Failed");
        return null;
      };
      const link = (secret) => el("a", { href: "#/secrets/" + encodeURIComponent(secret) }, secret);
      const rows = [];
      if (env.length) {
        rows.push(["Environment", el("ul", {}, ...env.map((r) => el("li", { "data-secret-env": r.name },
          el("code", {}, r.name), " ← ", link(r.secret), "/", el("code", {}, r.key), " ", missing(r.secret, r.key))))]);
      }
      if (files.length) {
        rows.push(["Files", el("ul", {}, ...files.map((r) => el("li", { "data-secret-file": r.secret },
          link(r.secret), " → ", el("code", {}, r.path || "/var/sless/secrets/" + r.secret),
          r.path ? null : el("span", { class: "muted" }, " (default)"), " ", missing(r.secret))))]);
      }
      box.replaceChildren(el("dl", {}, ...definitions(rows)));
    };
    draw(null);
    let list;
    try {
      list = await call("GET", nsPath("secrets"));
    } catch (e) {
      return; // the references alone
    }
    if (gen === state.view) draw(new Map((list.secrets || []).map((s) => [s.name, s])));
  }

  function route() {
    leave();
    if (!state.token) return show("signin");
    if (!state.ns) return signIn(state.token);
    const sec = location.hash.match(/^#\/secrets(?:\/([a-z0-9-]+))?$/);
    if (sec) return secretsView(sec[1] || "");
    const m = location.hash.match(/^#\/fn\/([a-z0-9-]+)(?:\/([a-z]+)(?:\/([0-9a-f]{24}))?)?$/);
    if (m) functionView(m[1], TABS.includes(m[2]) ? m[2] : "overview", m[3] || "");
    else listView();
  }

  document.addEventListener("DOMContentLoaded", () => {
    $("signin-form").addEventListener("submit", (e) => {
      e.preventDefault();
      signIn($("token").value);
    });
    $("signout").addEventListener("click", () => signOut());
    $("older").addEventListener("click", () => invocations({ name: state.fn }, state.view, true));
    $("invoke-send").addEventListener("click", invoke);
    $("secret-form").addEventListener("submit", saveSecret);
    $("secret-add-key").addEventListener("click", () => {
      const row = secretKeyRow("");
      $("secret-keys").append(row);
      row.querySelector(".secret-key").focus();
    });
    $("async-refresh").addEventListener("click", () => route());
    $("event").addEventListener("keydown", (e) => {
      if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) invoke();
    });
    $("logs-follow").addEventListener("click", () => {
      const lg = state.logs;
      if ($("logs-follow").dataset.following === "true") {
        lg.ctrl.abort();
        following(false, "stopped");
      } else tail(state.fn, state.view);
    });
    for (const id of ["logs-tail", "logs-since"]) $(id).addEventListener("change", () => tail(state.fn, state.view));
    $("logs-pause").addEventListener("click", () => setAutoscroll(!state.logs.autoscroll));
    $("logs").addEventListener("scroll", () => {
      const box = $("logs");
      const atBottom = box.scrollHeight - box.scrollTop - box.clientHeight < 4;
      if (atBottom !== state.logs.autoscroll) setAutoscroll(atBottom);
    });
    for (const b of $("stats-windows").children) {
      b.addEventListener("click", () => {
        state.window = b.dataset.window;
        stats(state.fn, state.view);
      });
    }
    window.addEventListener("hashchange", () => {
      const token = takeFragmentToken();
      if (token) signIn(token);
      else route();
    });
    if (fragmentToken) signIn(fragmentToken);
    else route();
  });
})();
