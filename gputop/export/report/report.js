// gputop report: draws a recording's charts on <canvas>, no library, no network.
// Every chart shares one time axis (seconds since the first tick): drag across any chart
// to zoom all of them, double-click (or "whole run") to zoom out, pick an hour to jump.
// Each canvas column aggregates the points that fall into it (min/max for lines, means
// for the stacked phases, sums for the input share), so 100 000 steps draw as fast as 1000.
"use strict";
(function () {
  const started = performance.now();
  const D = JSON.parse(document.getElementById("report-data").textContent);
  const LEFT = 58, RIGHT = 14, TOP = 8, AXIS = 20;
  const LINE_INSET = 2;  // px between a plot's frame and its extreme values
  const PHASE_COLORS = { data: "#d64545", h2d: "#f08c2e", forward: "#3f7fe0",
    backward: "#2aa198", optimizer: "#8e5bd0", other: "#a8a8a8" };
  const PALETTE = ["#3f7fe0", "#e0663f", "#2aa198", "#c2409a", "#8e5bd0", "#b58900",
    "#5c9e31", "#d64545", "#268bd2", "#7a7a7a"];
  const SEVERITY = { critical: "#d64545", warn: "#f08c2e", info: "#3f7fe0" };
  const full = { x0: 0, x1: Math.max(D.end - D.start, 1) };
  const view = { x0: full.x0, x1: full.x1 };
  const charts = [];
  let cursorX = null;

  function decode(b64, Type) {
    const text = atob(b64);
    const bytes = new Uint8Array(text.length);
    for (let i = 0; i < text.length; i++) bytes[i] = text.charCodeAt(i);
    return new Type(bytes.buffer);
  }
  const f32 = (b) => decode(b, Float32Array);
  const f64 = (b) => decode(b, Float64Array);

  function lowerBound(xs, v) {  // first index with xs[i] >= v
    let lo = 0, hi = xs.length;
    while (lo < hi) { const mid = (lo + hi) >> 1; if (xs[mid] < v) lo = mid + 1; else hi = mid; }
    return lo;
  }

  function niceStep(span, count) {
    const raw = span / Math.max(count, 1), p = Math.pow(10, Math.floor(Math.log10(raw)));
    const r = raw / p;
    return (r <= 1 ? 1 : r <= 2 ? 2 : r <= 5 ? 5 : 10) * p;
  }

  function fmtNumber(v, unit) {
    if (v === null || !isFinite(v)) return "n/a";
    const a = Math.abs(v);
    const s = a >= 100 ? v.toFixed(0) : a >= 10 ? v.toFixed(1) : a >= 1 ? v.toFixed(2) : v.toPrecision(2);
    return s + (unit || "");
  }

  const pad = (n) => String(n).padStart(2, "0");
  function clock(t, withSeconds, withDate) {
    const d = new Date((D.start + t) * 1000);
    const hm = pad(d.getHours()) + ":" + pad(d.getMinutes()) + (withSeconds ? ":" + pad(d.getSeconds()) : "");
    return withDate ? (d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate()) + " " + hm) : hm;
  }
  function span(seconds) {
    if (seconds < 120) return seconds.toFixed(seconds < 10 ? 1 : 0) + " s";
    if (seconds < 7200) return (seconds / 60).toFixed(0) + " min";
    if (seconds < 172800) return (seconds / 3600).toFixed(1) + " h";
    return (seconds / 86400).toFixed(1) + " d";
  }

  const TIME_STEPS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800,
    21600, 43200, 86400, 172800, 604800];
  function timeTicks(x0, x1, width) {
    const want = Math.max(2, Math.floor(width / 110));
    const step = TIME_STEPS.find((s) => (x1 - x0) / s <= want) || TIME_STEPS[TIME_STEPS.length - 1];
    const tz = new Date(D.start * 1000).getTimezoneOffset() * 60;
    const first = Math.ceil((D.start + x0 - tz) / step) * step + tz - D.start;
    const ticks = [];
    for (let t = first; t <= x1; t += step) ticks.push(t);
    return { ticks, seconds: step < 60, date: step >= 86400 || (x1 - x0) > 86400 };
  }

  // ---- one chart: a canvas plus its header, drawn by a `draw` function of its kind ----
  function makeChart(spec) {
    const section = document.createElement("section");
    section.className = "chart";
    section.id = "chart-" + spec.id;
    const head = document.createElement("header");
    const h2 = document.createElement("h2");
    h2.textContent = spec.title;
    const legend = document.createElement("div");
    legend.className = "legend";
    head.append(h2, legend);
    const plot = document.createElement("div");
    plot.className = "plot";
    plot.style.height = spec.height + "px";
    const canvas = document.createElement("canvas");
    const sel = document.createElement("div");
    sel.className = "selection";
    const cursor = document.createElement("div");
    cursor.className = "cursor";
    plot.append(canvas, sel, cursor);
    section.append(head, plot);
    if (spec.note) {
      const p = document.createElement("p");
      p.className = "note";
      p.textContent = spec.note;
      section.append(p);
    }
    spec.parent.append(section);
    const chart = Object.assign({ section, legend, plot, canvas, sel, cursor }, spec);
    chart.legendItems = (spec.series || []).map((s) => {
      const item = document.createElement("span");
      item.className = "item";
      const swatch = document.createElement("i");
      swatch.style.background = s.color;
      if (s.dash) swatch.className = "dash";
      const label = document.createElement("span");
      label.textContent = s.name;
      const value = document.createElement("b");
      item.append(swatch, label, value);
      legend.append(item);
      return value;
    });
    attachMouse(chart);
    charts.push(chart);
    return chart;
  }

  function toPx(chart, t) { return LEFT + (t - chart.v.x0) / (chart.v.x1 - chart.v.x0) * chart.pw; }
  function toT(chart, px) { return chart.v.x0 + (px - LEFT) / chart.pw * (chart.v.x1 - chart.v.x0); }

  function render(chart) {
    if (chart.section.hidden) return;
    const dpr = window.devicePixelRatio || 1;
    const w = chart.plot.clientWidth, h = chart.height;
    if (chart.canvas.width !== Math.round(w * dpr) || chart.canvas.height !== Math.round(h * dpr)) {
      chart.canvas.width = Math.round(w * dpr);
      chart.canvas.height = Math.round(h * dpr);
    }
    const ctx = chart.canvas.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, w, h);
    chart.v = chart.overview ? full : view;
    chart.pw = Math.max(10, w - LEFT - RIGHT);
    chart.ph = h - TOP - AXIS;
    chart.ctx = ctx;
    if (chart.empty) {
      ctx.fillStyle = "#777";
      ctx.font = "13px sans-serif";
      ctx.fillText(chart.empty, LEFT, TOP + chart.ph / 2);
      drawTimeAxis(chart);
      return;
    }
    const range = chart.draw(chart);
    drawTimeAxis(chart);
    if (range) drawValueAxis(chart, range);
    if (chart.overview) {
      const a = toPx(chart, view.x0), b = toPx(chart, view.x1);
      ctx.fillStyle = "rgba(63,127,224,0.15)";
      ctx.fillRect(a, TOP, Math.max(2, b - a), chart.ph);
      ctx.strokeStyle = "#3f7fe0";
      ctx.strokeRect(a, TOP, Math.max(2, b - a), chart.ph);
    }
  }

  function drawTimeAxis(chart) {
    const ctx = chart.ctx, y = TOP + chart.ph;
    ctx.strokeStyle = "#bbb";
    ctx.beginPath();
    ctx.moveTo(LEFT, y + 0.5);
    ctx.lineTo(LEFT + chart.pw, y + 0.5);
    ctx.stroke();
    const { ticks, seconds, date } = timeTicks(chart.v.x0, chart.v.x1, chart.pw);
    ctx.fillStyle = "#555";
    ctx.font = "11px sans-serif";
    ctx.textAlign = "center";
    for (const t of ticks) {
      const x = Math.round(toPx(chart, t)) + 0.5;
      grid(ctx, x, TOP, x, y);
      ctx.fillText(clock(t, seconds, date), x, y + 14);
    }
    ctx.textAlign = "left";
  }

  function grid(ctx, x0, y0, x1, y1) {  // a light line drawn behind what is already there
    ctx.globalCompositeOperation = "destination-over";
    ctx.strokeStyle = "#ececec";
    ctx.beginPath();
    ctx.moveTo(x0, y0);
    ctx.lineTo(x1, y1);
    ctx.stroke();
    ctx.globalCompositeOperation = "source-over";
  }

  function drawValueAxis(chart, range) {
    const ctx = chart.ctx;
    const step = niceStep(range.max - range.min, chart.ph > 120 ? 4 : 2);
    ctx.fillStyle = "#555";
    ctx.font = "11px sans-serif";
    ctx.textAlign = "right";
    const decimals = step >= 1 ? 0 : Math.ceil(-Math.log10(step));
    for (let v = Math.ceil(range.min / step) * step; v <= range.max + step * 1e-9; v += step) {
      const y = Math.round(range.y(v)) + 0.5;
      grid(ctx, LEFT, y, LEFT + chart.pw, y);
      ctx.fillText(v.toFixed(decimals) + chart.unit, LEFT - 6, y + 4);
    }
    ctx.textAlign = "left";
  }

  function valueRange(chart, min, max) {
    if (!(max > min)) max = min + 1;
    // Inset by a line's width: a series at its minimum or maximum (a GPU busy 100 % all run)
    // is drawn inside the plot, not hidden on its frame.
    const top = TOP + LINE_INSET, ph = chart.ph - 2 * LINE_INSET;
    return { min, max, y: (v) => top + ph - (v - min) / (max - min) * ph };
  }

  // The visible slice of a series, each canvas column's first/min/max/last over it.
  function columns(chart, xs) {
    const n = chart.pw, x0 = chart.v.x0, scale = n / (chart.v.x1 - chart.v.x0);
    const i0 = Math.max(0, lowerBound(xs, x0) - 1), i1 = Math.min(xs.length, lowerBound(xs, chart.v.x1) + 1);
    return { i0, i1, n, col: (i) => Math.floor((xs[i] - x0) * scale) };
  }

  function visibleMax(xs, ys, v) {
    const i0 = lowerBound(xs, v.x0), i1 = lowerBound(xs, v.x1);
    let max = -Infinity;
    for (let i = i0; i < i1; i++) if (ys[i] > max) max = ys[i];
    return max;
  }

  function drawLines(chart) {
    const ctx = chart.ctx;
    let max = chart.yMax || 0;
    if (!chart.yFixed) for (const s of chart.series) max = Math.max(max, visibleMax(s.x, s.y, chart.v) * 1.05);
    const range = valueRange(chart, 0, max > 0 ? max : 1);
    for (const band of chart.bands || []) {
      ctx.fillStyle = band.color;
      const a = range.y(Math.min(band.to, range.max)), b = range.y(band.from);
      if (band.from < range.max) ctx.fillRect(LEFT, a, chart.pw, b - a);
    }
    ctx.save();
    ctx.beginPath();
    ctx.rect(LEFT, TOP, chart.pw, chart.ph);
    ctx.clip();
    for (const s of chart.series) drawSeries(chart, s, range);
    for (const line of chart.rules || []) {
      ctx.strokeStyle = line.color;
      ctx.setLineDash([4, 3]);
      const y = Math.round(range.y(line.at)) + 0.5;
      ctx.beginPath();
      ctx.moveTo(LEFT, y);
      ctx.lineTo(LEFT + chart.pw, y);
      ctx.stroke();
      ctx.setLineDash([]);
      ctx.fillStyle = line.color;
      ctx.fillText(line.label, LEFT + 4, y - 3);
    }
    ctx.restore();
    return range;
  }

  // A line through the points, or each column's min..max where points outnumber pixels;
  // NaN and a pause much longer than the usual spacing break the line.
  function drawSeries(chart, s, range) {
    const ctx = chart.ctx, xs = s.x, ys = s.y;
    const c = columns(chart, xs);
    ctx.strokeStyle = s.color;
    ctx.lineWidth = s.width || 1.25;
    ctx.setLineDash(s.dash ? [5, 3] : []);
    ctx.beginPath();
    let open = false, lastX = -Infinity;
    const brk = s.gapAfter || Infinity;
    if (c.i1 - c.i0 <= c.n * 2) {
      for (let i = c.i0; i < c.i1; i++) {
        const y = ys[i];
        if (!(y === y) || xs[i] - lastX > brk) open = false;
        if (y === y) {
          const px = toPx(chart, xs[i]), py = range.y(y);
          if (open) ctx.lineTo(px, py); else ctx.moveTo(px, py);
          open = true;
          lastX = xs[i];
        }
      }
    } else {
      let col = -1, first = 0, last = 0, lo = 0, hi = 0, have = false;
      const flush = () => {
        if (!have) return;
        const px = LEFT + col + 0.5;
        if (open) ctx.lineTo(px, range.y(first)); else ctx.moveTo(px, range.y(first));
        ctx.lineTo(px, range.y(lo));
        ctx.lineTo(px, range.y(hi));
        ctx.lineTo(px, range.y(last));
        open = true;
      };
      for (let i = c.i0; i < c.i1; i++) {
        const y = ys[i], k = c.col(i);
        if (k !== col) { flush(); col = k; have = false; }
        if (!(y === y) || xs[i] - lastX > brk) { flush(); open = false; have = false; if (!(y === y)) continue; }
        if (!have) { first = lo = hi = y; have = true; }
        if (y < lo) lo = y;
        if (y > hi) hi = y;
        last = y;
        lastX = xs[i];
      }
      flush();
    }
    ctx.stroke();
    ctx.setLineDash([]);
    ctx.lineWidth = 1;
  }

  // Steps stacked by phase: each column holds the mean of each phase over the steps that
  // ended in it (a step drawn where it ran once zoomed in), with the slowest step as a line.
  function drawStack(chart) {
    const tr = chart.trainer, ctx = chart.ctx, names = tr.phaseNames, n = chart.pw;
    const c = columns(chart, tr.end);
    const k = names.length;
    const sums = new Float64Array(n * k), counts = new Uint32Array(n), slowest = new Float32Array(n);
    const first = new Float64Array(n), last = new Float64Array(n);
    const perStep = c.i1 - c.i0 <= n / 2;
    let max = 0;
    for (let i = c.i0; i < c.i1; i++) {
      const col = c.col(i);
      if (col < 0 || col >= n) continue;
      if (!counts[col]++) first[col] = tr.end[i] - tr.duration[i] / 1000;
      last[col] = tr.end[i];
      for (let j = 0; j < k; j++) sums[col * k + j] += tr.phase[j][i];
      if (tr.duration[i] > slowest[col]) slowest[col] = tr.duration[i];
    }
    for (let col = 0; col < n; col++) {
      if (!counts[col]) continue;
      let total = 0;
      for (let j = 0; j < k; j++) total += sums[col * k + j];
      max = Math.max(max, perStep ? slowest[col] : total / counts[col]);
    }
    const range = valueRange(chart, 0, max * 1.08 || 1);
    ctx.save();
    ctx.beginPath();
    ctx.rect(LEFT, TOP, chart.pw, chart.ph);
    ctx.clip();
    if (perStep) {
      for (let i = c.i0; i < c.i1; i++) {
        const a = toPx(chart, tr.end[i] - tr.duration[i] / 1000), b = toPx(chart, tr.end[i]);
        let base = 0;
        for (let j = 0; j < k; j++) {
          const v = tr.phase[j][i];
          ctx.fillStyle = PHASE_COLORS[names[j]];
          const y0 = range.y(base), y1 = range.y(base + v);
          ctx.fillRect(a, y1, Math.max(1, b - a - 0.5), y0 - y1);
          base += v;
        }
      }
    } else {
      for (let j = 0; j < k; j++) {
        ctx.fillStyle = PHASE_COLORS[names[j]];
        for (let col = 0; col < n; col++) {
          if (!counts[col]) continue;
          let base = 0;
          for (let m = 0; m < j; m++) base += sums[col * k + m];
          const v = sums[col * k + j] / counts[col];
          base /= counts[col];
          const y0 = range.y(base), y1 = range.y(base + v);
          ctx.fillRect(LEFT + col, y1, 1, y0 - y1);
        }
      }
      ctx.strokeStyle = "rgba(40,40,40,0.55)";
      columnLine(ctx, n, slowestOrNaN(slowest, counts), first, last, tr.gapAfter, range.y);
    }
    ctx.restore();
    return range;
  }

  function slowestOrNaN(slowest, counts) {
    return slowest.map((v, col) => counts[col] ? v : NaN);
  }

  // A line through the columns that hold a value, broken where the trainer stood idle
  // longer than `gapAfter` seconds between the steps of two columns.
  function columnLine(ctx, n, value, first, last, gapAfter, y) {
    ctx.beginPath();
    let prev = -1;
    for (let col = 0; col < n; col++) {
      if (!(value[col] === value[col])) continue;
      const py = y(value[col]);
      if (prev >= 0 && first[col] - last[prev] <= gapAfter) ctx.lineTo(LEFT + col + 0.5, py);
      else ctx.moveTo(LEFT + col + 0.5, py);
      prev = col;
    }
    ctx.stroke();
  }

  // Input share of step time per column (sum of input over sum of input + compute) over
  // the verdict's bands: low below 5 %, moderate to 20 %, high above; data-bound from 50 %.
  function drawShare(chart) {
    const tr = chart.trainer, n = chart.pw, ctx = chart.ctx;
    const range = valueRange(chart, 0, 100);
    const b = D.bands;
    const bands = [[0, b.moderately, "rgba(42,161,152,0.12)", "low"],
      [b.moderately, b.highly, "rgba(240,140,46,0.14)", "moderate"],
      [b.highly, 100, "rgba(214,69,69,0.12)", "high"]];
    for (const [from, to, color] of bands) {
      ctx.fillStyle = color;
      ctx.fillRect(LEFT, range.y(to), chart.pw, range.y(from) - range.y(to));
    }
    ctx.fillStyle = "#777";
    ctx.font = "10px sans-serif";
    ctx.textAlign = "right";
    for (const [from, to, , word] of bands) {  // each band's name, where it has room
      const top = range.y(to), bottom = range.y(from);
      if (bottom - top >= 11) ctx.fillText(word, LEFT + chart.pw - 4, (top + bottom) / 2 + 4);
    }
    ctx.textAlign = "left";
    const y50 = Math.round(range.y(b.data_bound)) + 0.5;
    ctx.strokeStyle = "#d64545";
    ctx.setLineDash([4, 3]);
    ctx.beginPath();
    ctx.moveTo(LEFT, y50);
    ctx.lineTo(LEFT + chart.pw, y50);
    ctx.stroke();
    ctx.setLineDash([]);
    ctx.fillStyle = "#d64545";
    ctx.fillText("data-bound", LEFT + 4, y50 - 3);
    const c = columns(chart, tr.end);
    const num = new Float64Array(n), den = new Float64Array(n);
    const first = new Float64Array(n), last = new Float64Array(n);
    for (let i = c.i0; i < c.i1; i++) {
      const col = c.col(i), inp = tr.input[i], cmp = tr.compute[i];
      if (col < 0 || col >= n || !(inp === inp) || !(cmp === cmp)) continue;
      if (!(den[col] > 0)) first[col] = tr.end[i] - tr.duration[i] / 1000;
      last[col] = tr.end[i];
      num[col] += inp;
      den[col] += inp + cmp;
    }
    const share = new Float64Array(n);
    for (let col = 0; col < n; col++) share[col] = den[col] > 0 ? 100 * num[col] / den[col] : NaN;
    ctx.strokeStyle = "#222";
    ctx.lineWidth = 1.25;
    columnLine(ctx, n, share, first, last, tr.gapAfter, range.y);
    ctx.lineWidth = 1;
    return range;
  }

  // One row per piece of advice, a bar wherever it was shown, coloured by severity.
  function drawTimeline(chart) {
    const ctx = chart.ctx, rows = D.advice, rowH = chart.ph / Math.max(rows.length, 1);
    ctx.save();
    ctx.beginPath();
    ctx.rect(LEFT, TOP, chart.pw, chart.ph);
    ctx.clip();
    rows.forEach((row, r) => {
      const y = TOP + r * rowH;
      for (const s of row.spans) {
        if (s[1] < chart.v.x0 || s[0] > chart.v.x1) continue;
        const a = toPx(chart, s[0]), b = toPx(chart, s[1]);
        ctx.fillStyle = SEVERITY[s[2]] || "#888";
        ctx.fillRect(a, y + 2, Math.max(1.5, b - a), rowH - 4);
      }
      ctx.fillStyle = "#222";
      ctx.font = "11px sans-serif";
      ctx.fillText(row.id + ": " + (row.title || ""), LEFT + 4, y + rowH / 2 + 4);
    });
    ctx.restore();
    return null;
  }

  // ---- interaction: drag to zoom every chart, double-click for the whole run ----
  function attachMouse(chart) {
    let from = null;
    const x = (e) => e.clientX - chart.plot.getBoundingClientRect().left;
    chart.plot.addEventListener("mousedown", (e) => { from = x(e); e.preventDefault(); });
    chart.plot.addEventListener("mousemove", (e) => {
      const px = x(e);
      cursorX = toT(chart, Math.max(LEFT, Math.min(LEFT + chart.pw, px)));
      showCursor();
      if (from === null) return;
      chart.sel.style.display = "block";
      chart.sel.style.left = Math.min(from, px) + "px";
      chart.sel.style.width = Math.abs(px - from) + "px";
    });
    chart.plot.addEventListener("mouseleave", () => { cursorX = null; showCursor(); });
    window.addEventListener("mouseup", (e) => {
      if (from === null) return;
      const a = toT(chart, Math.min(from, x(e))), b = toT(chart, Math.max(from, x(e)));
      chart.sel.style.display = "none";
      const wide = Math.abs(x(e) - from) > 4;
      from = null;
      if (wide) zoom(a, b);
    });
    chart.plot.addEventListener("dblclick", () => zoom(full.x0, full.x1));
  }

  function zoom(a, b) {
    const min = 1;  // never narrower than a second
    if (b - a < min) { const m = (a + b) / 2; a = m - min / 2; b = m + min / 2; }
    view.x0 = Math.max(full.x0, a);
    view.x1 = Math.min(full.x1, b);
    document.getElementById("range").textContent = clock(view.x0, true, true) + " – " +
      clock(view.x1, true, true) + " (" + span(view.x1 - view.x0) + ")";
    renderAll();
  }

  function showCursor() {
    for (const chart of charts) {
      const visible = cursorX !== null && !chart.section.hidden && cursorX >= chart.v.x0 && cursorX <= chart.v.x1;
      chart.cursor.style.display = visible ? "block" : "none";
      if (visible) chart.cursor.style.left = toPx(chart, cursorX) + "px";
      (chart.series || []).forEach((s, i) => {
        if (cursorX === null || !s.y) { chart.legendItems[i].textContent = ""; return; }
        const j = Math.min(s.x.length - 1, Math.max(0, lowerBound(s.x, cursorX) - 1));
        chart.legendItems[i].textContent = s.x.length ? " " + fmtNumber(s.y[j], s.unit || chart.unit) : "";
      });
      if (chart.hover) chart.hover(chart);
    }
    const at = document.getElementById("at");
    at.textContent = cursorX === null ? "" : clock(cursorX, true, true);
  }

  function renderAll() { for (const chart of charts) render(chart); }

  // ---- the charts ----
  const t = f64(D.t);
  const tick = D.ticks > 1 ? (t[t.length - 1] - t[0]) / (t.length - 1) : 1;
  const main = document.getElementById("charts");

  const trainers = D.trainers.map((tr) => {
    const end = f64(tr.end), duration = f32(tr.duration);
    const phaseNames = Object.keys(tr.phases).concat(["other"]);
    const phase = Object.keys(tr.phases).map((name) => f32(tr.phases[name]));
    const other = new Float32Array(duration.length);
    for (let i = 0; i < duration.length; i++) {
      let known = 0;
      for (const p of phase) { const v = p[i]; if (v === v) known += v; }
      other[i] = Math.max(0, duration[i] - known);
    }
    for (const p of phase) for (let i = 0; i < p.length; i++) if (!(p[i] === p[i])) p[i] = 0;
    phase.push(other);
    return Object.assign({}, tr, { end, duration, phaseNames, phase, input: f32(tr.input),
      compute: f32(tr.compute), gapAfter: Math.max(5, 20 * (tr.median_step_s || 0)) });
  });

  const decoded = performance.now();
  // The overview: GPU 0's utilization, or the host's CPU where the recording has no GPU.
  const cores = D.host.cpu_count || 1;
  const overview = D.gpus.length ? { name: "GPU 0 utilization", y: f32(D.gpus[0].util) }
    : { name: "host CPU", y: f32(D.host_cores_busy).map((v) => v / cores) };
  makeChart({ id: "overview", title: "Whole run (drag here or on any chart to zoom)", height: 56,
    parent: main, overview: true, unit: " %",
    series: [{ name: overview.name, color: "#3f7fe0", x: t, y: overview.y, gapAfter: tick * 5 }],
    draw: (chart) => { drawSeries(chart, chart.series[0], valueRange(chart, 0, 100)); return null; } });

  const select = document.getElementById("trainer");
  trainers.forEach((tr, i) => {
    const opt = document.createElement("option");
    opt.value = i;
    opt.textContent = "PID " + tr.pid + (tr.name ? " — " + tr.name : "") + " (" + tr.steps + " steps)";
    select.append(opt);
  });
  select.parentElement.hidden = trainers.length < 2;
  const stepCharts = [];
  trainers.forEach((tr, i) => {
    const who = trainers.length > 1 ? " — PID " + tr.pid : "";
    const empty = tr.steps ? null : "no steps recorded for this trainer";
    const stack = makeChart({ id: "steps-" + i, title: "Step time by phase" + who, unit: " ms", height: 190,
      parent: main, draw: drawStack, trainer: tr, empty,
      series: tr.phaseNames.map((name, j) => ({ name, color: PHASE_COLORS[name], x: tr.end, y: tr.phase[j], unit: " ms" })),
      note: "Each pixel column is the mean of each phase over the steps that ended in it; " +
        "the dark line is the slowest of them. Zoom in to see single steps." });
    const words = tr.outside_model ? "Input (outside the model)" : "Data wait";
    const share = makeChart({ id: "share-" + i, title: words + " share of step time" + who, unit: " %", height: 150,
      parent: main, draw: drawShare, trainer: tr, empty,
      series: [{ name: tr.gpu_timed ? "GPU idle before the step / step" : "input / step", color: "#222",
        x: tr.end, y: shareOf(tr), unit: " %" }],
      note: "Bands as in the live view: low < " + D.bands.moderately + " %, moderate < " + D.bands.highly +
        " %, high above; data-bound from " + D.bands.data_bound + " %." });
    stepCharts.push([stack, share]);
  });
  function shareOf(tr) {
    const out = new Float32Array(tr.input.length);
    for (let i = 0; i < out.length; i++) out[i] = 100 * tr.input[i] / (tr.input[i] + tr.compute[i]);
    return out;
  }
  function showTrainer(k) {
    stepCharts.forEach((pair, i) => pair.forEach((c) => { c.section.hidden = i !== k; }));
    renderAll();
  }
  select.addEventListener("change", () => showTrainer(Number(select.value)));
  stepCharts.forEach((pair, i) => pair.forEach((c) => { c.section.hidden = i !== 0; }));
  if (!trainers.length) {
    const p = document.createElement("p");
    p.className = "empty";
    p.textContent = "No probed trainer was attached during this recording: no steps to chart.";
    main.append(p);
  }

  const gapAfter = tick * 5;
  const gpuSeries = (key, unit) => D.gpus.map((g, i) => ({ name: "GPU " + g.index, color: PALETTE[i % PALETTE.length],
    x: t, y: f32(g[key]), gapAfter, unit }));
  const noGpu = D.gpus.length ? null : "no GPU in this recording";
  makeChart({ id: "gpu-util", title: "GPU utilization", unit: " %", height: 150, parent: main, draw: drawLines,
    series: gpuSeries("util", " %"), yMax: 100, yFixed: true, empty: noGpu });
  const memTotal = Math.max(0, ...D.gpus.map((g) => g.memory_total_gib || 0));
  makeChart({ id: "gpu-memory", title: "GPU memory used", unit: " GiB", height: 150, parent: main, draw: drawLines,
    series: gpuSeries("memory", " GiB"), yMax: memTotal, yFixed: memTotal > 0, empty: noGpu,
    note: memTotal ? "Scale: the largest device's " + memTotal.toFixed(0) + " GiB." : null });

  const workerSeries = D.workers.map((w, i) => ({ name: "PID " + w.pid + " workers (" + w.workers + ")",
    color: PALETTE[i % PALETTE.length], x: t, y: f32(w.cpu), gapAfter, unit: " %" }));
  workerSeries.push({ name: "whole host", color: "#999", dash: true, x: t, y: f32(D.host_cores_busy), gapAfter, unit: " %" });
  makeChart({ id: "workers", title: "DataLoader workers' CPU (100 % = one core)", unit: " %", height: 150,
    parent: main, draw: drawLines, series: workerSeries,
    yMax: 100, note: "Summed over each trainer's workers; the host has " + (D.host.cpu_count || "?") +
      " cores (" + (100 * (D.host.cpu_count || 0)) + " %)." });

  const m = D.membw;
  const membwEmpty = !m ? "not recorded (--membw off)" : (m.source === "none" ? "not measured: " + (m.note || m.source) : null);
  makeChart({ id: "membw", title: "Memory-bandwidth pressure", unit: " %", height: 150, parent: main, draw: drawLines,
    empty: membwEmpty, yMax: 100,
    series: m && !membwEmpty ? [
      { name: "bandwidth used, % of peak", color: "#8e5bd0", x: t, y: f32(m.pressure), gapAfter, unit: " %" },
      { name: "PSI memory some (avg10)", color: "#d64545", x: t, y: f32(m.psi_some), gapAfter, unit: " %" }] : [],
    note: m && !membwEmpty ? "Source: " + m.source + " (" + m.confidence + ")." + (m.note ? " " + m.note : "") : null });

  const timeline = makeChart({ id: "advice", title: "Advice shown", height: Math.max(60, 22 * D.advice.length + AXIS + TOP),
    parent: main, draw: drawTimeline, series: [], empty: D.advice.length ? null : "no advice was shown during this recording" });
  const tip = document.getElementById("tip");
  timeline.hover = (chart) => {
    tip.hidden = true;
    if (cursorX === null || !D.advice.length) return;
    for (const row of D.advice) for (const s of row.spans) {
      if (cursorX >= s[0] && cursorX <= s[1]) {
        tip.hidden = false;
        tip.textContent = "";
        const lines = D.advice.filter((r) => r.spans.some((x) => cursorX >= x[0] && cursorX <= x[1]))
          .map((r) => r.spans.find((x) => cursorX >= x[0] && cursorX <= x[1]));
        for (const x of lines) {
          const b = document.createElement("b");
          b.textContent = "[" + x[2] + "] " + x[3];
          const p = document.createElement("p");
          p.textContent = x[4] + " — " + x[5];
          tip.append(b, p);
        }
        return;
      }
    }
  };

  // ---- settings and notes ----
  const settings = document.getElementById("settings");
  for (const tr of trainers) {
    const h3 = document.createElement("h3");
    h3.textContent = "PID " + tr.pid + (tr.name ? " — " + tr.name : "") + ": " + tr.steps + " steps" +
      (tr.steps ? " (" + tr.first_step + "…" + tr.last_step + ")" : "");
    settings.append(h3);
    if (!tr.settings.length) {
      const p = document.createElement("p");
      p.textContent = "The probe reported no settings.";
      settings.append(p);
    }
    const keys = [];
    for (const s of tr.settings) for (const [k] of s.values) if (!keys.includes(k)) keys.push(k);
    if (keys.length) {
      const table = document.createElement("table");
      const head = table.insertRow();
      head.insertCell().textContent = "setting";
      for (const s of tr.settings) head.insertCell().textContent = "from " + clock(s.at, true, true);
      for (const k of keys) {
        const row = table.insertRow();
        row.insertCell().textContent = k;
        for (const s of tr.settings) {
          const found = s.values.find((v) => v[0] === k);
          row.insertCell().textContent = found ? String(found[1]) : "—";
        }
      }
      settings.append(table);
    }
    if (tr.gaps.length) {
      const missing = tr.gaps.reduce((a, g) => a + (g.missing || 0), 0);
      const p = document.createElement("p");
      p.textContent = "Not in the file: " + missing + " steps in " + tr.gaps.length + " gaps (" +
        Array.from(new Set(tr.gaps.map((g) => g.reason))).join("; ") + ").";
      settings.append(p);
    }
  }

  // ---- controls ----
  const hours = document.getElementById("hour");
  const firstHour = Math.floor(D.start / 3600) * 3600;
  for (let h = firstHour, k = 0; h < D.end && k < 744; h += 3600, k++) {
    const opt = document.createElement("option");
    opt.value = h - D.start;
    opt.textContent = clock(h - D.start, false, true) + " + 1 h";
    hours.append(opt);
  }
  hours.addEventListener("change", () => {
    if (hours.value === "") zoom(full.x0, full.x1);
    else zoom(Number(hours.value), Number(hours.value) + 3600);
  });
  document.getElementById("whole").addEventListener("click", () => { hours.value = ""; zoom(full.x0, full.x1); });
  document.getElementById("out").addEventListener("click", () => {
    const w = (view.x1 - view.x0), mid = (view.x0 + view.x1) / 2;
    zoom(mid - w, mid + w);
  });
  const pan = (dir) => { const w = view.x1 - view.x0; zoom(view.x0 + dir * w / 2, view.x1 + dir * w / 2); };
  document.getElementById("left").addEventListener("click", () => pan(-1));
  document.getElementById("right").addEventListener("click", () => pan(1));
  let pending = false;
  window.addEventListener("resize", () => {
    if (pending) return;
    pending = true;
    requestAnimationFrame(() => { pending = false; renderAll(); });
  });

  zoom(full.x0, full.x1);
  const drawn = performance.now();
  performance.mark("gputop-report-drawn");
  window.gputopReport = { scriptMs: drawn - started, decodedMs: decoded, drawnMs: drawn,
    charts: charts.map((c) => ({ id: c.section.id, shown: !c.section.hidden, empty: c.empty || null })) };
  requestAnimationFrame(() => setTimeout(() => {  // the first frame with the charts is painted
    window.gputopReport.paintedMs = performance.now();
    document.body.dataset.ready = "1";
  }, 0));
})();
