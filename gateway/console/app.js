// The sless console: a static page over the /v1 API. The token lives in sessionStorage and is
// sent as a Bearer token; every view is rendered from API answers with DOM APIs (no HTML from
// data except the highlighter's escaped output).
(function () {
  "use strict";
  const $ = (id) => document.getElementById(id);
  const hl = window.slessHighlight;
  const state = { token: sessionStorage.getItem("sless.token") || "", ns: "", before: "" };

  class APIError extends Error {
    constructor(status, body) {
      super(body.error || "HTTP " + status);
      this.status = status;
    }
  }

  async function call(method, path, body) {
    const opts = { method, headers: { Authorization: "Bearer " + state.token, Accept: "application/json" } };
    if (body !== undefined) {
      opts.headers["Content-Type"] = "application/json";
      opts.body = JSON.stringify(body);
    }
    const resp = await fetch(path, opts);
    const data = resp.status === 204 ? {} : await resp.json().catch(() => ({}));
    if (!resp.ok) {
      if (resp.status === 401) signOut("Your token was rejected: " + (data.error || "unauthorized"));
      throw new APIError(resp.status, data);
    }
    return data;
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

  function show(section) {
    for (const id of ["signin", "functions", "function"]) $(id).hidden = id !== section;
    $("signout").hidden = section === "signin";
  }

  function signOut(message) {
    sessionStorage.removeItem("sless.token");
    state.token = "";
    state.ns = "";
    $("who").textContent = "";
    $("signin-error").textContent = message || "";
    show("signin");
  }

  async function signIn(token) {
    state.token = token.trim();
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
    const phase = fn.status.phase || "Pending";
    const url = fn.status.url ? el("a", { href: fn.status.url, onclick: (e) => e.stopPropagation() }, fn.status.url) : "";
    return el("tr", { class: "clickable", "data-function": fn.name, onclick: () => (location.hash = "#/fn/" + fn.name) },
      el("td", {}, el("a", { href: "#/fn/" + fn.name }, fn.name)),
      el("td", {}, fn.runtime),
      el("td", {}, ...kinds(fn, triggers).map((k) => badge(k, "kind-" + k))),
      el("td", {}, badge(phase, "phase-" + phase), fn.status.last_build_error ? el("span", { class: "error", title: fn.status.last_build_error }, " build failed") : null),
      el("td", {}, url));
  }

  async function functionView(name) {
    show("function");
    $("fn-name").textContent = name;
    $("fn-meta").replaceChildren();
    $("trigger-rows").replaceChildren();
    $("invocation-rows").replaceChildren();
    $("source-tabs").replaceChildren();
    $("source-code").textContent = "";
    $("trigger-error").textContent = "";
    state.before = "";
    let fn;
    try {
      fn = await call("GET", nsPath("functions", name));
    } catch (e) {
      $("fn-meta").append(el("dd", { class: "error" }, "Could not load the function: " + e.message));
      return;
    }
    const phase = fn.status.phase || "Pending";
    const meta = [["Phase", badge(phase, "phase-" + phase)], ["Runtime", fn.runtime], ["Entrypoint", fn.entrypoint || "(default)"],
      ["Memory", fn.memory_mb + " MiB"], ["Timeout", fn.timeout_sec ? fn.timeout_sec + " s" : "none"],
      ["Replicas", fn.min_replicas + "–" + fn.max_replicas], ["URL", fn.status.url || "—"], ["Image", fn.status.image || "—"]];
    if (fn.status.message) meta.push(["Message", fn.status.message]);
    $("fn-meta").replaceChildren(...meta.flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, v)]));
    const be = $("fn-build-error");
    be.hidden = !fn.status.last_build_error;
    be.textContent = fn.status.last_build_error ? "Build failed:\n" + fn.status.last_build_error : "";
    await Promise.all([triggers(name), source(name), invocations(name)]);
  }

  async function triggers(name) {
    try {
      const tl = await call("GET", nsPath("triggers"));
      $("trigger-rows").replaceChildren(...tl.triggers.filter((t) => t.function === name).map(triggerRow));
    } catch (e) {
      $("trigger-error").textContent = "Could not list triggers: " + e.message;
    }
  }

  function triggerRow(t) {
    const detail = t.type === "cron" ? t.schedule + (t.timezone ? " (" + t.timezone + ")" : "")
      : t.type === "event" ? "queue " + t.queue : t.require_auth ? "token required" : "public";
    const button = el("button", { "data-trigger": t.name, onclick: () => toggle(t, button) }, t.enabled ? "Disable" : "Enable");
    return el("tr", { "data-trigger-row": t.name },
      el("td", {}, t.name), el("td", {}, badge(t.type, "kind-" + t.type)), el("td", {}, detail),
      el("td", { class: t.enabled ? "state-on" : "state-off" }, t.enabled ? "enabled" : "disabled"), el("td", {}, button));
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

  async function source(name) {
    let src;
    try {
      src = await call("GET", nsPath("functions", name, "source"));
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

  async function invocations(name, more) {
    const q = "?limit=20" + (more && state.before ? "&before=" + encodeURIComponent(state.before) : "");
    let page;
    try {
      page = await call("GET", nsPath("functions", name, "invocations") + q);
    } catch (e) {
      $("invocation-rows").replaceChildren(el("tr", {}, el("td", { colspan: "7", class: "error" }, "History unavailable: " + e.message)));
      return;
    }
    const rows = page.invocations.map((i) => el("tr", { "data-invocation": String(i.id) },
      el("td", {}, new Date(i.start).toLocaleString()), el("td", {}, badge(i.kind, "kind-" + i.kind)),
      el("td", {}, badge(i.status, i.status === "succeeded" ? "phase-Ready" : "phase-Failed")),
      el("td", {}, i.http_status ? String(i.http_status) : ""), el("td", {}, i.duration_ms.toFixed(1) + " ms"),
      el("td", {}, i.error || ""), el("td", {}, el("code", {}, (i.trace_id || "").slice(0, 16)))));
    if (more) $("invocation-rows").append(...rows);
    else $("invocation-rows").replaceChildren(...rows);
    if (!more && !rows.length) $("invocation-rows").append(el("tr", {}, el("td", { colspan: "7" }, "No invocations recorded yet.")));
    state.before = page.next || "";
    $("older").hidden = !state.before;
  }

  function route() {
    if (!state.token) return show("signin");
    if (!state.ns) return signIn(state.token);
    const m = location.hash.match(/^#\/fn\/([a-z0-9-]+)$/);
    if (m) functionView(m[1]);
    else listView();
  }

  document.addEventListener("DOMContentLoaded", () => {
    $("signin-form").addEventListener("submit", (e) => {
      e.preventDefault();
      signIn($("token").value);
    });
    $("signout").addEventListener("click", () => signOut());
    $("older").addEventListener("click", () => {
      const m = location.hash.match(/^#\/fn\/([a-z0-9-]+)$/);
      if (m) invocations(m[1], true);
    });
    window.addEventListener("hashchange", route);
    route();
  });
})();
