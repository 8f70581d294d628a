// Charts of a function's invocation stats (GET .../stats), drawn as SVG with DOM APIs: bars
// of invocations per minute, the error rate and p50/p95 durations, one mark per bucket. No
// library and no inline styles (the console's CSP forbids them); colours come from app.css.
(function () {
  "use strict";
  const NS = "http://www.w3.org/2000/svg";
  const W = 900, H = 160, LEFT = 56, RIGHT = 10, TOP = 10, BOTTOM = 22;
  const PW = W - LEFT - RIGHT, PH = H - TOP - BOTTOM;

  function svg(tag, attrs, ...children) {
    const e = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
    for (const c of children) if (c !== null && c !== undefined) e.append(c);
    return e;
  }

  const title = (text) => svg("title", {}, text);

  // niceMax rounds v up to 1, 2 or 5 times a power of ten, so axis labels read well.
  function niceMax(v) {
    if (!(v > 0)) return 1;
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 2, 5, 10]) if (v <= m * p + 1e-9) return m * p;
    return 10 * p;
  }

  // num prints an axis value with at most three significant digits: 2.5, 40, 0.05.
  const num = (v) => String(parseFloat(v.toPrecision(3)));

  function ms(v) {
    if (v === undefined || v === null) return "—";
    if (v === 0) return "0";
    if (v >= 1000) return num(v / 1000) + " s";
    return num(v) + " ms";
  }

  const pad = (n) => String(n).padStart(2, "0");
  const hhmm = (d) => pad(d.getHours()) + ":" + pad(d.getMinutes());

  function bucketLabel(stats, b) {
    const start = new Date(b.start);
    const end = new Date(start.getTime() + stats.bucket_sec * 1000);
    let s = hhmm(start) + "–" + hhmm(end) + ": " + b.count + (b.count === 1 ? " invocation" : " invocations");
    if (b.count) s += ", " + b.errors + (b.errors === 1 ? " error" : " errors") + ", p50 " + ms(b.p50_ms) + ", p95 " + ms(b.p95_ms);
    return s;
  }

  // frame draws the axes of a chart whose values run from 0 to max.
  function frame(stats, max, fmt) {
    const g = svg("g", { class: "axis" });
    for (const f of [0, 0.5, 1]) {
      const y = TOP + PH * (1 - f);
      g.append(svg("line", { x1: LEFT, x2: W - RIGHT, y1: y, y2: y, class: f ? "grid" : "baseline" }));
      g.append(svg("text", { x: LEFT - 4, y: y + 4, "text-anchor": "end" }, fmt(max * f)));
    }
    const n = stats.buckets.length, start = new Date(stats.start).getTime(), span = new Date(stats.end).getTime() - start;
    for (const f of [0, 0.25, 0.5, 0.75, 1]) {
      const anchor = f === 0 ? "start" : f === 1 ? "end" : "middle";
      g.append(svg("text", { x: LEFT + PW * f, y: H - 4, "text-anchor": anchor }, hhmm(new Date(start + span * f))));
    }
    g.setAttribute("data-buckets", String(n));
    return g;
  }

  function chart(container, kind, ...children) {
    const root = svg("svg", { viewBox: "0 0 " + W + " " + H, class: "chart chart-" + kind, role: "img" }, ...children);
    container.replaceChildren(root);
    return root;
  }

  const slot = (stats) => PW / stats.buckets.length;
  const xOf = (stats, i) => LEFT + slot(stats) * (i + 0.5);
  const yOf = (v, max) => TOP + PH * (1 - Math.min(v, max) / max);

  // invocations draws one bar per bucket: invocations per minute, the errors' share in red.
  function invocations(container, stats) {
    const perMinute = stats.bucket_sec / 60;
    const max = niceMax(Math.max(...stats.buckets.map((b) => b.count / perMinute)));
    const w = Math.max(1, slot(stats) * 0.8);
    const bars = stats.buckets.map((b, i) => {
      const x = xOf(stats, i) - w / 2, y = yOf(b.count / perMinute, max), ye = yOf(b.errors / perMinute, max);
      return svg("g", { class: "bucket", "data-start": b.start, "data-count": b.count, "data-errors": b.errors },
        title(bucketLabel(stats, b)),
        svg("rect", { class: "bar", x, y, width: w, height: TOP + PH - y }),
        svg("rect", { class: "bar-errors", x, y: ye, width: w, height: TOP + PH - ye }));
    });
    const fmt = (v) => (v === 0 ? "0" : num(v) + "/min");
    return chart(container, "invocations", frame(stats, max, fmt), ...bars, empty(stats));
  }

  // series draws value(b) of every bucket with invocations as points joined within runs of
  // consecutive such buckets (no line across a quiet stretch).
  function series(stats, cls, value, max) {
    const g = svg("g", { class: "series " + cls });
    let run = [];
    const flush = () => {
      if (run.length > 1) g.prepend(svg("polyline", { class: "line", points: run.join(" ") }));
      run = [];
    };
    stats.buckets.forEach((b, i) => {
      if (!b.count) return flush();
      const v = value(b), x = xOf(stats, i), y = yOf(v, max);
      run.push(x.toFixed(1) + "," + y.toFixed(1));
      g.append(svg("circle", { class: "point", cx: x, cy: y, r: 2.5, "data-start": b.start, "data-value": v }, title(bucketLabel(stats, b))));
    });
    flush();
    return g;
  }

  function errors(container, stats) {
    const rate = (b) => (100 * b.errors) / b.count;
    const max = niceMax(Math.max(10, ...stats.buckets.filter((b) => b.count).map(rate))); // 0–10% at least
    return chart(container, "errors", frame(stats, max, (v) => num(v) + "%"), series(stats, "rate", rate, max), empty(stats));
  }

  function duration(container, stats) {
    const full = stats.buckets.filter((b) => b.count);
    const max = niceMax(Math.max(0, ...full.map((b) => b.p95_ms)));
    return chart(container, "duration", frame(stats, max, ms),
      series(stats, "p95", (b) => b.p95_ms, max), series(stats, "p50", (b) => b.p50_ms, max), empty(stats));
  }

  function empty(stats) {
    if (stats.total.count) return null;
    return svg("text", { class: "empty", x: LEFT + PW / 2, y: TOP + PH / 2, "text-anchor": "middle" }, "No invocations in this window");
  }

  window.slessChart = { invocations, errors, duration, ms };
})();
