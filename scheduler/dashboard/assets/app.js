// nomad-train dashboard: three pages (runs, a run, an experiment) routed by
// the URL's fragment, fed by /api/runs (polled) and server-sent events.
"use strict";

const main = document.getElementById("main");
const crumb = document.getElementById("crumb");
const live = document.getElementById("live");
let teardown = () => {};

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const k of kids.flat()) if (k != null) e.append(k instanceof Node ? k : String(k));
  return e;
}

function fmt(v) {
  if (typeof v !== "number") return v == null ? "" : String(v);
  if (Number.isInteger(v)) return String(v);
  return Math.abs(v) >= 1e4 || Math.abs(v) < 1e-3 ? v.toExponential(3) : v.toPrecision(4);
}

function age(unix) {
  if (!unix) return "";
  const s = Math.max(0, Date.now() / 1000 - unix);
  if (s < 90) return Math.round(s) + " s";
  if (s < 5400) return Math.round(s / 60) + " min";
  if (s < 129600) return Math.round(s / 3600) + " h";
  return Math.round(s / 86400) + " d";
}

function metricsText(m) {
  return Object.keys(m || {}).sort().map((k) => k + "=" + fmt(m[k])).join("  ");
}

// fill replaces a node's children, leaving out null ones.
function fill(node, ...kids) {
  node.replaceChildren(...kids.flat().filter((k) => k != null));
}

function table(headers, rows) {
  return el("table", {}, el("tr", {}, headers.map((h) => el("th", {}, h))), rows);
}

// ---- the runs page ----

function runsPage() {
  crumb.textContent = "runs";
  const box = el("div");
  fill(main, el("h2", {}, "Runs"), box);
  let timer = 0;
  const load = async () => {
    try {
      const runs = await (await fetch("api/runs")).json();
      fill(box, runsTable(runs || []));
      live.textContent = "updated " + new Date().toLocaleTimeString();
    } catch (e) {
      live.textContent = "offline: " + e;
    }
    timer = setTimeout(load, 2000);
  };
  load();
  return () => clearTimeout(timer);
}

function runsTable(runs) {
  if (!runs.length) return el("p", { class: "muted" }, "No runs yet under this storage path.");
  return table(["name", "kind", "state", "step", "records", "restarts", "last metrics", "age"],
    runs.map((r) => {
      const href = r.kind === "experiment" ? "#/exp?key=" + encodeURIComponent(r.key)
        : r.kind === "nomad" ? "#/run?job=" + encodeURIComponent(r.job_id)
        : "#/run?key=" + encodeURIComponent(r.key);
      return el("tr", { "data-run": r.key || r.job_id || "" },
        el("td", {}, r.job_id || r.key ? el("a", { href }, r.name) : r.name),
        el("td", {}, r.kind),
        el("td", { class: "state-" + r.state }, r.error ? "error: " + r.error : r.state),
        el("td", { class: "num" }, r.kind === "experiment" ? "" : r.step),
        el("td", { class: "num" }, r.records),
        el("td", { class: "num" }, r.restarts),
        el("td", {}, metricsText(r.metrics)),
        el("td", {}, age(r.updated)));
    }));
}

// ---- charts ----

const palette = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"];

// marksPlugin draws vertical marks: each {x, color, dash, label}.
function marksPlugin(getMarks) {
  return {
    hooks: {
      draw: [(u) => {
        const ctx = u.ctx;
        const { top, height } = u.bbox;
        ctx.save();
        ctx.font = Math.round(10 * devicePixelRatio) + "px sans-serif";
        for (const m of getMarks()) {
          if (m.x == null) continue;
          const cx = Math.round(u.valToPos(m.x, "x", true));
          if (cx < u.bbox.left || cx > u.bbox.left + u.bbox.width) continue;
          ctx.strokeStyle = ctx.fillStyle = m.color;
          ctx.setLineDash(m.dash || []);
          ctx.lineWidth = devicePixelRatio;
          ctx.beginPath();
          if (m.y != null) { // a point mark: a cross at (x, y)
            const cy = u.valToPos(m.y, m.scale || "y", true);
            const r = 5 * devicePixelRatio;
            ctx.moveTo(cx - r, cy - r); ctx.lineTo(cx + r, cy + r);
            ctx.moveTo(cx - r, cy + r); ctx.lineTo(cx + r, cy - r);
          } else {
            ctx.moveTo(cx, top + (m.short ? height - 8 * devicePixelRatio : 0));
            ctx.lineTo(cx, top + height);
          }
          ctx.stroke();
          if (m.label) ctx.fillText(m.label, cx + 3, top + 12 * devicePixelRatio);
        }
        ctx.restore();
      }],
    },
  };
}

// Chart keeps one uPlot in a box, recreated when its series change.
class Chart {
  constructor(parent, title, attrs) {
    this.box = el("div", Object.assign({ class: "chart" }, attrs), el("h3", {}, title));
    parent.append(this.box);
    this.plot = null;
    this.key = "";
    this.marks = [];
  }
  logOK(data) {
    return data.slice(1).every((ys) => ys.every((y) => y == null || y > 0));
  }
  // series: [{label, color}], data: uPlot data, time: x is wall time.
  set(series, data, time, marks) {
    this.marks = marks || [];
    const key = JSON.stringify([series.map((s) => s.label), time, this.logOK(data)]);
    if (this.plot && key === this.key) {
      this.plot.setData(data);
      return;
    }
    if (this.plot) this.plot.destroy();
    this.key = key;
    const width = Math.max(360, Math.min(640, (main.clientWidth - 80) / 2));
    // A loss falls by orders of magnitude: a log scale shows its tail.
    const log = /loss/.test(this.box.dataset.metric || "") && this.logOK(data);
    this.plot = new uPlot({
      width, height: 240,
      scales: { x: { time }, y: log ? { distr: 3 } : {} },
      axes: [{ label: time ? "" : "step" }, {}],
      series: [{ label: time ? "time" : "step" }].concat(series.map((s) => ({
        label: s.label, stroke: s.color, width: 1.5, spanGaps: true, points: { size: 4 },
      }))),
      plugins: [marksPlugin(() => this.marks)],
    }, data, this.box);
  }
}

// ---- a run ----

const maxCheckpointRows = 20;

// metricNames lists the metrics reported, counters such as epoch last.
function metricNames(recs) {
  const counter = (n) => /^(epoch|step|iteration|training_iteration)s?$/.test(n);
  return [...new Set(recs.flatMap((r) => Object.keys(r.metrics)))].sort((a, b) =>
    counter(a) - counter(b) || (a < b ? -1 : a > b ? 1 : 0));
}

function runPage(params) {
  const key = params.get("key"), job = params.get("job");
  crumb.textContent = "run " + (key || job);
  const st = { records: [], checkpoints: [], failure: null, nomad: null, xaxis: "step", charts: {} };
  const head = el("div");
  const charts = el("div", { class: "charts", id: "charts" });
  const below = el("div");
  const xsel = el("select", { id: "xaxis", onchange: () => { st.xaxis = xsel.value; draw(); } },
    el("option", { value: "step" }, "x: step"), el("option", { value: "time" }, "x: wall time"));
  fill(main, head, el("div", { class: "controls" }, xsel,
    el("span", { class: "legend-note" }, "  green ticks: checkpoints committed · red dashed lines: restarts (a new generation)")), charts, below);

  const draw = () => {
    const recs = st.records;
    const last = recs[recs.length - 1];
    fill(head, el("h2", {}, st.name || key || job),
      el("div", { class: "muted" }, recs.length + " records · step " + (last ? last.step : "-") +
        " · generation " + (last ? last.generation : "-") + " · last report " + (last ? age(last.time) + " ago" : "-")),
      st.failure ? el("div", { class: "failure" }, "Failed: " + st.failure.reason + " (exit code " + st.failure.exit_code + ")") : null);
    const names = metricNames(recs);
    const time = st.xaxis === "time";
    const xs = recs.map((r) => time ? r.time : r.step);
    const marks = [];
    recs.forEach((r, i) => {
      if (r.checkpoint) marks.push({ x: xs[i], color: "#0a7d32", short: true });
      const p = recs[i - 1];
      if (p && (p.generation !== r.generation || p.attempt !== r.attempt))
        marks.push({ x: xs[i], color: "#d62728", dash: [4, 3], label: "gen " + r.generation });
    });
    for (const name of names) {
      let c = st.charts[name];
      if (!c) c = st.charts[name] = new Chart(charts, name, { "data-metric": name });
      const ys = recs.map((r) => (name in r.metrics ? r.metrics[name] : null));
      c.box.dataset.points = ys.filter((y) => y != null).length;
      c.box.dataset.restarts = marks.filter((m) => m.label).length;
      c.set([{ label: name, color: palette[0] }], [xs, ys], time, marks);
    }
    fill(below, 
      el("h2", {}, "Checkpoints"),
      st.checkpoints.length ? table(["name", "step", "generation", "metrics (scores)"],
        st.checkpoints.slice(-maxCheckpointRows).reverse().map((c) => el("tr", {}, el("td", {}, c.name), el("td", { class: "num" }, c.step),
          el("td", { class: "num" }, c.generation), el("td", {}, metricsText(c.metrics))))) : el("p", { class: "muted" }, "none yet"),
      st.checkpoints.length > maxCheckpointRows ? el("p", { class: "muted" }, (st.checkpoints.length - maxCheckpointRows) + " older checkpoints not shown") : null,
      st.nomad ? workersView(st.nomad) : null);
  };

  const es = new EventSource("api/run/events?" + (key ? "key=" + encodeURIComponent(key) : "job=" + encodeURIComponent(job)));
  es.onmessage = (ev) => {
    const u = JSON.parse(ev.data);
    if (u.name) st.name = u.name;
    if (u.reset) st.records = [];
    if (u.records) st.records.push(...u.records);
    if (u.checkpoints) st.checkpoints = u.checkpoints;
    if (u.failure) st.failure = u.failure;
    if (u.nomad) st.nomad = u.nomad;
    live.textContent = "live · " + new Date().toLocaleTimeString();
    draw();
  };
  es.onerror = streamError;
  return () => es.close();
}

function workersView(n) {
  return el("div", {},
    el("h2", {}, "Workers on Nomad (job " + n.job_id + ", " + n.phase + ", " + n.restarts + " restarts)"),
    table(["rank", "alloc", "node", "state", "restarts", "reschedules", "last event"],
      (n.workers || []).map((w) => el("tr", {}, el("td", {}, w.Rank), el("td", {}, (w.AllocID || "").slice(0, 8)),
        el("td", {}, w.NodeName), el("td", {}, w.ClientStatus), el("td", { class: "num" }, w.Restarts),
        el("td", { class: "num" }, w.Reschedules), el("td", {}, w.LastEvent)))),
    (n.failures || []).length ? el("ul", {}, n.failures.map((f) => el("li", {}, f))) : null);
}

// ---- an experiment ----

function expPage(params) {
  const key = params.get("key");
  crumb.textContent = "experiment" + (key === "." ? "" : " " + key);
  const st = { trials: [], records: {}, metric: "", mode: "", sort: "id", desc: false, charts: {} };
  const head = el("h2", {}, "Experiment");
  const msel = el("select", { id: "metric", onchange: () => { st.metric = msel.value; draw(); } });
  const modesel = el("select", { id: "mode", onchange: () => { st.mode = modesel.value; draw(); } },
    el("option", { value: "min" }, "min"), el("option", { value: "max" }, "max"));
  const tbl = el("div"), best = el("div"), charts = el("div", { class: "charts", id: "charts" });
  fill(main, head, el("div", { class: "controls" }, "best by ", msel, " ", modesel), tbl,
    el("h2", {}, "Best config"), best, el("h2", {}, "Curves"),
    el("div", { class: "legend-note" }, "× : stopped by the scheduler · dashed lines: PBT exploits (at the donor's time)"), charts);

  const bestOf = (id) => {
    const ys = (st.records[id] || []).map((r) => r.metrics[st.metric]).filter((y) => y != null);
    if (!ys.length) return null;
    return st.mode === "max" ? Math.max(...ys) : Math.min(...ys);
  };
  const draw = () => {
    const names = metricNames(Object.values(st.records).flat());
    if (!st.metric && names.length) {
      st.metric = names.includes("loss") ? "loss" : names[0];
      st.mode = /loss|err/.test(st.metric) ? "min" : "max";
    }
    fill(msel, ...names.map((n) => el("option", { value: n }, n)));
    msel.value = st.metric;
    modesel.value = st.mode || "min";
    const rows = st.trials.map((t) => ({ t, best: bestOf(t.id) }));
    const val = (r) => st.sort === "best" ? r.best : st.sort === "status" ? r.t.status : st.sort === "iterations" ? r.t.iterations :
      st.sort === "time" ? r.t.time_total_s : r.t.id;
    rows.sort((a, b) => {
      const x = val(a), y = val(b);
      const c = x == null ? 1 : y == null ? -1 : x < y ? -1 : x > y ? 1 : 0;
      return st.desc ? -c : c;
    });
    const sortTh = (k, label) => el("th", { class: "sortable", "data-sort": k, onclick: () => {
      st.desc = st.sort === k ? !st.desc : false; st.sort = k; draw(); } }, label + (st.sort === k ? (st.desc ? " ▾" : " ▴") : ""));
    fill(tbl, el("table", { id: "trials" },
      el("tr", {}, sortTh("id", "trial"), sortTh("status", "status"), el("th", {}, "config"), sortTh("iterations", "iterations"),
        sortTh("time", "total time (s)"), sortTh("best", "best " + st.metric), el("th", {}, "reason")),
      rows.map(({ t, best }) => el("tr", { "data-trial": t.id }, el("td", {}, t.id), el("td", { class: "status-" + t.status }, t.status),
        el("td", {}, metricsText(t.params || t.config)), el("td", { class: "num" }, t.iterations),
        el("td", { class: "num time" }, t.time_total_s ? fmt(t.time_total_s) : "-"), el("td", { class: "num" }, fmt(best)), el("td", {}, t.reason || "")))));
    const top = rows.filter((r) => r.best != null).sort((a, b) => st.mode === "max" ? b.best - a.best : a.best - b.best)[0];
    fill(best, top ? el("div", { class: "best" }, top.t.id + ": " + st.metric + " " + fmt(top.best) + "\n" +
      JSON.stringify(top.t.config, null, 2)) : el("p", { class: "muted" }, "no results yet"));
    const ids = st.trials.map((t) => t.id).filter((id) => (st.records[id] || []).length);
    for (const name of names) {
      let c = st.charts[name];
      if (!c) c = st.charts[name] = new Chart(charts, name, { "data-metric": name });
      const tables = ids.map((id) => {
        const rs = st.records[id].filter((r) => name in r.metrics);
        return [rs.map((r) => r.step), rs.map((r) => r.metrics[name])];
      });
      const counts = {};
      ids.forEach((id, i) => { counts[id] = tables[i][1].length; });
      c.box.dataset.seriesPoints = JSON.stringify(counts);
      const marks = [];
      ids.forEach((id, i) => {
        const t = st.trials.find((x) => x.id === id);
        const color = palette[i % palette.length];
        const [xs, ys] = tables[i];
        if (t.status === "STOPPED" && xs.length) marks.push({ x: xs[xs.length - 1], y: ys[ys.length - 1], color });
        for (const e of t.exploits || []) marks.push({ x: e.time, color, dash: [4, 3], label: "← " + e.donor });
      });
      c.box.dataset.stops = marks.filter((m) => m.y != null).length;
      c.box.dataset.exploits = marks.filter((m) => m.label).length;
      const data = tables.length ? uPlot.join(tables) : [[]];
      c.set(ids.map((id, i) => ({ label: id, color: palette[i % palette.length] })), data, false, marks);
    }
  };

  const es = new EventSource("api/experiment/events?key=" + encodeURIComponent(key));
  es.onmessage = (ev) => {
    const u = JSON.parse(ev.data);
    if (u.name) head.textContent = "Experiment " + u.name;
    if (u.metric) { st.metric = u.metric; st.mode = u.mode || st.mode; } // the experiment's own, until the user picks
    if (u.trials) st.trials = u.trials;
    for (const [id, tr] of Object.entries(u.records || {})) {
      if (tr.reset || !st.records[id]) st.records[id] = [];
      st.records[id].push(...(tr.records || []));
    }
    live.textContent = "live · " + new Date().toLocaleTimeString();
    draw();
  };
  es.onerror = streamError;
  return () => es.close();
}

// streamError shows why a stream broke: the server's "error" event names
// the cause (a corrupt progress line, say); EventSource then reconnects.
function streamError(ev) {
  live.textContent = ev.data ? "error: " + ev.data + " (retrying)" : "reconnecting…";
}

// ---- routing ----

function route() {
  teardown();
  const h = location.hash.replace(/^#\/?/, "");
  const [page, query] = h.split("?");
  const params = new URLSearchParams(query || "");
  if (page === "run") teardown = runPage(params);
  else if (page === "exp") teardown = expPage(params);
  else teardown = runsPage();
}

window.addEventListener("hashchange", route);
route();
