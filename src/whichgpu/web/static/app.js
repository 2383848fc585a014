/* whichgpu ui: one page, five tabs over the JSON API (/api/...); the Serve tab has two views (one
   configuration, or which GPUs for a rate). The view's state lives in the URL's hash
   (#view?key=value&...), so a link reproduces it. Every figure comes from the server;
   this file only lays out and draws. Charts: uPlot (vendored, static/vendor/uplot). */
"use strict";

const PRECISIONS = ["auto", "fp32", "tf32", "amp-fp16", "amp-bf16", "fp16", "bf16", "fp8", "int8", "int4"];
const USE_CASES = ["", "learning", "kaggle", "cv-research", "nlp-research", "llm-finetune", "llm-pretrain",
  "llm-serving", "image-generation"];
const COLORS = ["#2f6fdb", "#e8833a", "#8a63d2", "#2e9e6b", "#c94f7c", "#7a8797", "#d6b33c", "#3fb0c9",
  "#9c5b3b", "#4d5fa8", "#6aa84f", "#c0392b", "#16a085"];

/* One form per view: [name, label, kind, default, options]. kind: model, text, wide, number, select.
   A view is a tab's own unless it names its `tab` (then the tab's modes toggle between them) and
   asks /api/NAME for its own name unless it names its `endpoint`. */
const PAGES = {
  recommend: {
    title: "Recommend", fields: [
      ["model", "model (empty: a use case)", "model", ""],
      ["use_case", "use case", "select", "", USE_CASES],
      ["task", "task", "select", "", ["", "train", "infer"]],
      ["batch_size", "batch", "number", ""],
      ["seq_len", "sequence", "number", ""],
      ["precision", "precision", "select", "auto", PRECISIONS],
      ["finetune", "fine-tuning", "select", "", ["", "full", "lora", "qlora"]],
      ["budget", "budget $", "number", ""],
      ["mode", "buy or rent", "select", "buy", ["buy", "rent"]],
      ["objective", "objective", "select", "", ["", "value", "time", "energy", "cost-per-job"]],
      ["job_tokens", "job tokens", "number", ""],
      ["max_gpus", "max GPUs", "number", ""],
    ],
  },
  compare: {
    title: "Compare", fields: [
      ["model", "model", "model", "gpt2"],
      ["gpu", "GPUs (comma-separated)", "wide", "h100-sxm5-80gb,a100-sxm4-80gb,rtx-4090"],
      ["task", "task", "select", "train", ["train", "infer"]],
      ["batch_size", "batch", "number", ""],
      ["seq_len", "sequence", "number", ""],
      ["precision", "precision", "select", "auto", PRECISIONS],
      ["finetune", "fine-tuning", "select", "full", ["full", "lora", "qlora"]],
      ["gpus", "GPUs each", "number", ""],
    ],
  },
  fit: {
    title: "Fit", fields: [
      ["model", "model", "model", "gpt2"],
      ["gpu", "GPU", "text", "rtx-4090"],
      ["task", "task", "select", "train", ["train", "infer"]],
      ["batch_size", "batch", "number", ""],
      ["seq_len", "sequence", "number", ""],
      ["precision", "precision", "select", "auto", PRECISIONS],
      ["finetune", "fine-tuning", "select", "full", ["full", "lora", "qlora"]],
      ["checkpointing", "checkpointing", "select", "none", ["none", "selective", "full"]],
      ["sharding", "sharding", "select", "ddp", ["ddp", "zero1", "zero2", "zero3", "fsdp-full", "fsdp-hybrid", "fsdp-grad-op"]],
      ["gpus", "GPUs", "number", ""],
    ],
  },
  plan: {
    title: "Plan", fields: [
      ["model", "model (decoder LLM)", "model", "llama-3-8b"],
      ["gpu", "GPU", "text", "h100-sxm5-80gb"],
      ["gpus", "GPUs", "number", "8"],
      ["global_batch", "global batch", "number", ""],
      ["seq_len", "sequence", "number", ""],
      ["precision", "precision", "select", "", ["", "bf16", "fp16", "fp8", "amp-bf16", "fp32", "tf32"]],
      ["tp", "TP", "number", ""],
      ["pp", "PP", "number", ""],
      ["schedule", "schedule", "select", "", ["", "1f1b", "gpipe", "interleaved-1f1b", "zb-h1", "zb-h2", "zb-v"]],
      ["objective", "objective", "select", "time", ["time", "cost"]],
    ],
  },
  serve: {
    title: "Serve", fields: [
      ["model", "model (decoder LLM)", "model", "llama-3.1-8b"],
      ["gpu", "GPU", "text", "h100-sxm5-80gb"],
      ["tp", "TP", "number", ""],
      ["ep", "EP (MoE)", "number", ""],
      ["attention_dp", "DP attention", "number", ""],
      ["rate", "requests/s", "number", "5"],
      ["input_len", "prompt tokens", "number", "1000"],
      ["output_len", "answer tokens", "number", "200"],
      ["requests", "requests", "number", "300"],
      ["precision", "weights", "select", "bf16", ["bf16", "fp16", "fp8", "int8", "int4", "fp4"]],
      ["engine", "engine", "select", "vllm", ["vllm", "sglang", "tensorrt-llm"]],
      ["slo_ttft_ms", "TTFT SLO ms", "number", ""],
      ["slo_tpot_ms", "TPOT SLO ms", "number", ""],
    ],
  },
  "serve-rate": {
    title: "Serve: which GPUs for a rate", tab: "serve", endpoint: "recommend-serving",
    hint: "each GPU x TP is simulated until the targets break; the whole catalog takes tens of seconds", fields: [
      ["model", "model (decoder LLM)", "model", "llama-3.1-8b"],
      ["rate", "requests/s", "number", "5"],
      ["input_len", "prompt tokens", "number", "1000"],
      ["output_len", "answer tokens", "number", "200"],
      ["slo_ttft_ms", "TTFT SLO ms", "number", "500"],
      ["slo_tpot_ms", "TPOT SLO ms", "number", "50"],
      ["slo_percentile", "percentile", "select", "90", ["50", "90", "99"]],
      ["engine", "engine", "select", "vllm", ["vllm", "sglang", "tensorrt-llm"]],
      ["precision", "weights", "select", "bf16", ["bf16", "fp16", "fp8", "int8", "int4", "fp4"]],
      ["mode", "buy or rent", "select", "buy", ["buy", "rent"]],
      ["max_gpus", "max GPUs", "number", ""],
      ["gpu", "GPUs (comma-separated; empty: every GPU)", "wide", ""],
    ],
  },
};
/* The views a tab toggles between: [view, label]. */
const MODES = { serve: [["serve", "one configuration"], ["serve-rate", "which GPUs for a rate"]] };
const tabOf = (view) => PAGES[view].tab || view;

const state = { page: "recommend", params: {}, models: [], uploads: [], seq: 0, charts: [] };
const $ = (id) => document.getElementById(id);

function esc(x) {
  return String(x === null || x === undefined ? "" : x).replace(/[&<>"']/g,
    (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
}

function fmt(x, digits = 3) {
  if (x === null || x === undefined || Number.isNaN(x)) return "–";
  if (typeof x !== "number") return esc(x);
  const a = Math.abs(x);
  if (a !== 0 && (a >= 1e7 || a < 1e-3)) return x.toExponential(2);
  if (a >= 1000) return Math.round(x).toLocaleString("en-US");
  return Number(x.toPrecision(digits)).toLocaleString("en-US", { maximumFractionDigits: 6 });
}

const pct = (x) => (x === null || x === undefined ? "–" : (100 * x).toFixed(1) + "%");
const gb = (b) => (b === null || b === undefined ? "–" : (b / 1e9).toFixed(2));

/* ---- URL state ------------------------------------------------------------------------------ */

function readHash() {
  const h = location.hash.replace(/^#\/?/, "");
  const [page, query] = h.split("?");
  state.page = PAGES[page] ? page : "recommend";
  state.params = {};
  for (const [k, v] of new URLSearchParams(query || "")) state.params[k] = v;
}

function paramsOf(page, given) {
  const out = {};
  for (const [name, , , dflt] of PAGES[page].fields) {
    const v = name in given ? given[name] : dflt;
    if (v !== "" && v !== null && v !== undefined) out[name] = String(v);
  }
  return out;
}

function writeHash() {
  const q = new URLSearchParams(paramsOf(state.page, state.params)).toString();
  history.replaceState(null, "", "#" + state.page + (q ? "?" + q : ""));
}

/* ---- the form --------------------------------------------------------------------------------- */

function modelOptions(value, allowEmpty) {
  const opts = [];
  if (allowEmpty) opts.push(`<option value="">— use case —</option>`);
  const ups = state.uploads.slice();
  if (value && value.startsWith("upload:") && !ups.some((u) => u.model === value)) ups.push({ model: value, filename: value });
  if (ups.length) {
    opts.push(`<optgroup label="uploaded config.json">` + ups.map((u) =>
      `<option value="${esc(u.model)}"${u.model === value ? " selected" : ""}>${esc(u.filename)} (${esc(u.model)})</option>`).join("") + `</optgroup>`);
  }
  const fams = {};
  for (const m of state.models) (fams[m.family] = fams[m.family] || []).push(m);
  for (const fam of Object.keys(fams).sort()) {
    opts.push(`<optgroup label="${esc(fam)}">` + fams[fam].map((m) =>
      `<option value="${esc(m.id)}"${m.id === value ? " selected" : ""}>${esc(m.id)} — ${esc(m.title)}</option>`).join("") + `</optgroup>`);
  }
  if (value && !value.startsWith("upload:") && !state.models.some((m) => m.id === value)) {
    opts.push(`<option value="${esc(value)}" selected>${esc(value)}</option>`);  // the server will judge it
  }
  return opts.join("");
}

function renderForm() {
  const p = paramsOf(state.page, state.params);
  const html = PAGES[state.page].fields.map(([name, label, kind, , options]) => {
    const v = p[name] || "";
    let input;
    if (kind === "model") {
      input = `<select name="${name}" id="f-${name}">${modelOptions(v, state.page === "recommend")}</select>`;
    } else if (kind === "select") {
      input = `<select name="${name}" id="f-${name}">` + options.map((o) =>
        `<option value="${esc(o)}"${o === v ? " selected" : ""}>${o === "" ? "default" : esc(o)}</option>`).join("") + `</select>`;
    } else {
      const type = kind === "number" ? "number" : "text";
      const cls = kind === "wide" ? ' class="wide"' : "";
      input = `<input type="${type}" name="${name}" id="f-${name}" value="${esc(v)}"${cls}${type === "number" ? ' step="any"' : ""} placeholder="default">`;
    }
    return `<label>${esc(label)}${input}</label>`;
  }).join("");
  $("form").innerHTML = html;
  const modes = MODES[tabOf(state.page)];
  $("modes").hidden = !modes;
  $("modes").innerHTML = (modes || []).map(([view, label]) =>
    `<button type="button" role="tab" data-view="${view}" aria-selected="${view === state.page}">${esc(label)}</button>`).join("");
  document.querySelectorAll("#tabs button").forEach((b) => b.setAttribute("aria-selected", b.dataset.page === tabOf(state.page) ? "true" : "false"));
  document.title = `whichgpu — ${PAGES[state.page].title}`;
}

function formParams() {
  const out = {};
  for (const el of $("form").elements) if (el.name) out[el.name] = el.value.trim();
  return out;
}

/* ---- running a query -------------------------------------------------------------------------- */

let timer = null;
function schedule(delay = 300) {
  clearTimeout(timer);
  timer = setTimeout(run, delay);
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/* A question is a job (POST /api/jobs), polled until done: the status line counts the seconds
   meanwhile, and a newer question makes the page forget the older one. */
async function run() {
  const page = state.page;
  const params = paramsOf(page, state.params);
  const seq = ++state.seq;
  $("status").className = "busy";
  $("status").textContent = "computing…";
  $("error").hidden = true;
  let job;
  try {
    let res = await fetch("/api/jobs", { method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ endpoint: PAGES[page].endpoint || page, params }) });
    job = await res.json();
    while (res.ok && job.status === "running") {
      if (seq !== state.seq) return;
      $("status").textContent = `computing… ${job.elapsed_s.toFixed(1)} s` +
        (job.elapsed_s > 1 ? ` (${PAGES[page].hint || "a model's first trace takes seconds; then it is cached"})` : "");
      await sleep(job.elapsed_s < 2 ? 150 : 400);
      res = await fetch(`/api/jobs/${job.id}`);
      job = await res.json();
    }
    if (!res.ok) {
      if (seq === state.seq) { showError(job.error || `HTTP ${res.status}`); $("result").innerHTML = ""; }
      return;
    }
  } catch (e) {
    if (seq === state.seq) showError(`the server did not answer (${e.message}); is whichgpu ui still running?`);
    return;
  }
  if (seq !== state.seq) return;  // a newer question was asked meanwhile
  const doc = job.result || {};
  $("status").className = "";
  if (job.http_status !== 200) {
    showError(doc.error || `HTTP ${job.http_status}`);
    $("result").innerHTML = "";
    return;
  }
  $("status").textContent = (doc.answer === "no" ? "answered: no" : "answered") + ` in ${job.elapsed_s.toFixed(1)} s`;
  destroyCharts();
  const result = $("result");
  result.innerHTML = "";
  if (doc.answer === "no" && doc.reason) result.insertAdjacentHTML("beforeend", `<div class="no" id="no-answer">no: ${esc(doc.reason)}</div>`);
  if (doc.schema) RENDER[page](doc, result);
  result.dataset.ready = String(seq);
}

function showError(message) {
  $("status").className = "";
  $("status").textContent = "";
  $("error").textContent = "error: " + message;
  $("error").hidden = false;
}

function destroyCharts() {
  for (const c of state.charts) c.destroy();
  state.charts = [];
}

/* ---- drawing helpers -------------------------------------------------------------------------- */

function table(headers, rows, id) {
  const head = headers.map((h) => `<th class="${h.t ? "t" : ""}">${esc(h.label)}</th>`).join("");
  const body = rows.map((r) => "<tr>" + r.map((c, i) => `<td class="${headers[i].cls || (headers[i].t ? "t" : "")}">${c}</td>`).join("") + "</tr>").join("");
  return `<table${id ? ` id="${id}"` : ""}><thead><tr>${head}</tr></thead><tbody>${body}</tbody></table>`;
}

/* Stacked horizontal bars: rows = [{label, parts: [[name, value], ...], cap?}], all on one scale. */
function stackedBars(rows, unit, id) {
  const names = [];
  for (const r of rows) for (const [n] of r.parts) if (!names.includes(n)) names.push(n);
  const color = (n) => COLORS[names.indexOf(n) % COLORS.length];
  const max = Math.max(1e-30, ...rows.map((r) => Math.max(r.cap || 0, r.parts.reduce((s, [, v]) => s + Math.max(0, v || 0), 0))));
  const legend = `<div class="legend">` + names.map((n) => `<span><i style="background:${color(n)}"></i>${esc(n)}</span>`).join("") + `</div>`;
  const body = rows.map((r) => {
    const total = r.parts.reduce((s, [, v]) => s + Math.max(0, v || 0), 0);
    const segs = r.parts.filter(([, v]) => v > 0).map(([n, v]) =>
      `<div class="bar-seg" style="width:${(100 * v / max).toFixed(3)}%;background:${color(n)}" title="${esc(n)}: ${fmt(v)} ${esc(unit)}"></div>`).join("");
    const cap = r.cap ? `<div class="bar-cap" style="left:${(100 * r.cap / max).toFixed(3)}%" title="capacity ${fmt(r.cap)} ${esc(unit)}"></div>` : "";
    return `<div class="bar-row"><div class="bar-label" title="${esc(r.label)}">${esc(r.label)}</div><div class="bar-track">${segs}${cap}</div><div class="bar-value">${fmt(total)} ${esc(unit)}</div></div>`;
  }).join("");
  return `<div class="bars"${id ? ` id="${id}"` : ""}>${legend}${body}</div>`;
}

function chartBox(parent, id) {
  const div = document.createElement("div");
  div.className = "chart";
  div.id = id;
  parent.appendChild(div);
  return div;
}

function plot(opts, data, el) {
  const u = new uPlot(opts, data, el);
  state.charts.push(u);
  return u;
}

/* ---- Recommend -------------------------------------------------------------------------------- */

function renderRecommend(doc, el) {
  const unit = doc.unit || "";
  const rows = doc.rows || [];
  const mode = (doc.request || {}).mode;
  let h = `<h2 id="result-title">${esc(doc.title)}: ranked by ${esc(doc.objective)}</h2>`;
  h += `<p class="note">${(doc.workloads || []).map((w) => esc(w.label)).join("; ")}</p>`;
  if ((doc.picks || []).length) h += `<ul class="picks">` + doc.picks.map((p) => `<li><b>${esc(p.title)}</b>: ${esc(p.config)} — ${esc(p.text)}</li>`).join("") + `</ul>`;
  h += table([{ label: "#" }, { label: "GPUs", t: 1 }, { label: `speed (${unit})` }, { label: "objective" },
    { label: mode === "rent" ? "$/hour" : "purchase $" }, { label: `${unit} per $` }, { label: "memory GB" }, { label: "why", t: 1, cls: "reason" }],
  rows.slice(0, 15).map((r) => [r.rank, `${r.gpus} x ${esc(r.name)}`, fmt(r.speed), fmt(r.objective_value),
    mode === "rent" ? fmt(r.usd_per_hour) : fmt(r.purchase_usd), fmt(r.value_per_usd), fmt(r.memory_gb),
    (r.reasons || [r.reason]).map(esc).join("<br>")]), "ranking");
  el.insertAdjacentHTML("beforeend", h);
  const priced = rows.filter((r) => r.value_per_usd !== null && r.value_per_usd !== undefined).slice(0, 15);
  if (priced.length && typeof uPlot !== "undefined") {
    el.insertAdjacentHTML("beforeend", `<h3>performance per dollar (${esc(unit)} per $${mode === "rent" ? " of rent" : " of purchase + power"}), top ${priced.length}</h3>`);
    const box = chartBox(el, "value-chart");
    const xs = priced.map((_, i) => i + 1);
    plot({
      width: Math.min(980, Math.max(520, priced.length * 60)), height: 300, legend: { show: false },
      scales: { x: { time: false, range: [0.4, priced.length + 0.6] }, y: { range: (u, lo, hi) => [0, hi * 1.08] } },
      axes: [{ values: (u, ticks) => ticks.map((t) => (Number.isInteger(t) && priced[t - 1] ? `${priced[t - 1].gpus}x ${priced[t - 1].gpu}` : "")),
        rotate: -30, size: 90, splits: () => xs }, { label: `${unit} per $`, size: 100, labelGap: 8 }],
      series: [{ label: "config", value: (u, v) => (v && priced[v - 1] ? priced[v - 1].key : "") },
        { label: `${unit} per $`, stroke: COLORS[0], fill: COLORS[0] + "99", paths: uPlot.paths.bars({ size: [0.6, 60] }), points: { show: false } }],
    }, [xs, priced.map((r) => r.value_per_usd)], box);
  }
  if (rows.length > 15) el.insertAdjacentHTML("beforeend", `<p class="note">${rows.length - 15} more configurations: <code>whichgpu recommend ... --top ${rows.length}</code> or the JSON at /api/recommend</p>`);
  if ((doc.cannot_run || []).length) {
    el.insertAdjacentHTML("beforeend", `<details><summary>${doc.cannot_run.length} GPUs cannot run this job</summary>` +
      table([{ label: "GPU", t: 1 }, { label: "why", t: 1, cls: "reason" }], doc.cannot_run.map((c) => [esc(c.name || c.gpu), esc(c.reason || c.why || "")])) + `</details>`);
  }
  if ((doc.notes || []).length) el.insertAdjacentHTML("beforeend", doc.notes.map((n) => `<p class="note">${esc(n)}</p>`).join(""));
}

/* ---- Compare ---------------------------------------------------------------------------------- */

function renderCompare(doc, el) {
  const res = doc.results || [];
  const w = (res[0] || {}).workload || {};
  const per = res[0] && res[0].throughput && res[0].throughput.tokens_per_s !== null && res[0].throughput.tokens_per_s !== undefined ? "tokens_per_s" : "samples_per_s";
  let h = `<h2 id="result-title">${esc(w.model)}: ${esc(w.task)}, batch ${esc(w.batch_size)}${w.seq_len ? ", sequence " + esc(w.seq_len) : ""} on ${res.length} GPUs</h2>`;
  h += table([{ label: "GPU", t: 1 }, { label: "step s" }, { label: per.replace(/_/g, " ").replace(" per s", "/s") }, { label: "MFU" },
    { label: "bound", t: 1 }, { label: "memory GB" }, { label: "of GB" }, { label: "fits", t: 1 }, { label: "precision", t: 1 }],
  res.map((r) => [esc(r.gpu_name), fmt(r.step_s), fmt((r.throughput || {})[per]), pct(r.mfu), esc(r.bound),
    gb((r.memory || {}).total_bytes), gb((r.memory || {}).capacity_bytes), (r.memory || {}).fits ? "yes" : "no", esc(r.precision)]), "compare-table");
  h += `<h3>where the step goes (seconds)</h3>`;
  h += stackedBars(res.map((r) => ({ label: r.gpu_name, parts: Object.entries(r.split || {}) })), "s", "time-split");
  el.insertAdjacentHTML("beforeend", h);
  if (typeof uPlot !== "undefined" && res.length) rooflineChart(res, el);
  el.insertAdjacentHTML("beforeend", `<h3>memory per GPU (GB; dashed: usable capacity)</h3>` + stackedBars(res.map((r) => ({
    label: r.gpu_name, cap: (r.memory || {}).capacity_bytes ? r.memory.capacity_bytes / 1e9 : 0,
    parts: (r.memory_breakdown || []).map((l) => [l.title || l.line, (l.bytes || 0) / 1e9]),
  })), "GB", "memory-breakdown"));
  for (const r of res) {
    el.insertAdjacentHTML("beforeend", `<details><summary>top ops on ${esc(r.gpu_name)}</summary>` + table(
      [{ label: "op", t: 1 }, { label: "category", t: 1 }, { label: "phase", t: 1 }, { label: "ms" }, { label: "bound", t: 1 }, { label: "FLOP/byte" }],
      (r.top_ops || []).map((o) => [esc(o.name), esc(o.category), esc(o.phase), fmt(o.seconds * 1e3), esc(o.bound), fmt(o.bytes ? o.flops / o.bytes : null)])) + `</details>`);
  }
}

function rooflineChart(res, el) {
  el.insertAdjacentHTML("beforeend", `<h3>roofline: the top ops (points) under each GPU's roof (lines); TFLOP/s against FLOP/byte</h3>`);
  const box = chartBox(el, "roofline-chart");
  const grid = [];
  for (let e = -2; e <= 4.01; e += 0.125) grid.push(Math.pow(10, e));
  const pts = [];
  res.forEach((r, i) => (r.top_ops || []).forEach((o) => {
    if (o.flops > 0 && o.bytes > 0 && o.seconds > 0) pts.push({ i, x: o.flops / o.bytes, y: o.flops / o.seconds / 1e12 });
  }));
  const xs = Array.from(new Set(grid.concat(pts.map((p) => p.x)))).sort((a, b) => a - b);
  const data = [xs];
  const series = [{ label: "FLOP/byte", value: (u, v) => fmt(v) }];
  res.forEach((r, i) => {
    const peak = (r.roofline || {}).peak_tflops, bw = (r.roofline || {}).memory_bandwidth_gbps;
    data.push(xs.map((x) => (peak && bw ? Math.min(peak, bw * x / 1e3) : null)));
    series.push({ label: `${r.gpu_name} roof`, stroke: COLORS[i % COLORS.length], width: 1.5, points: { show: false } });
    data.push(xs.map((x) => { const p = pts.find((q) => q.i === i && q.x === x); return p ? p.y : null; }));
    series.push({ label: `${r.gpu_name} ops`, stroke: COLORS[i % COLORS.length], paths: () => null,
      points: { show: true, size: 7, fill: COLORS[i % COLORS.length] } });
  });
  plot({
    width: 900, height: 360, series,
    scales: { x: { time: false, distr: 3 }, y: { distr: 3 } },
    axes: [{ label: "arithmetic intensity, FLOP/byte" }, { label: "TFLOP/s", size: 60 }],
  }, data, box);
}

/* ---- Fit -------------------------------------------------------------------------------------- */

function renderFit(doc, el) {
  const w = doc.workload || {};
  let h = `<h2 id="result-title">${esc(w.model)} on ${esc((doc.gpu || {}).name)}: ${doc.fits ? "fits" : "does not fit"} at batch ${esc(w.batch_size)}</h2>`;
  h += `<p>${fmt(doc.total_gb)} GB of ${fmt(doc.capacity_gb)} GB usable (headroom ${fmt(doc.headroom_gb)} GB); peak in ${esc(doc.peak_phase)}</p>`;
  h += stackedBars([{ label: "per GPU", cap: doc.capacity_gb, parts: (doc.breakdown || []).map((l) => [l.title || l.line, l.gb]) }], "GB", "memory-breakdown");
  h += table([{ label: "memory", t: 1 }, { label: "GB" }, { label: "assumption", t: 1, cls: "reason" }],
    (doc.breakdown || []).map((l) => [esc(l.title || l.line), fmt(l.gb), esc(l.assumption || "")]), "breakdown");
  const mb = doc.max_batch;
  if (mb) h += `<p id="max-batch"><b>largest batch that fits:</b> ${mb.batch_size ? esc(mb.batch_size) : "none"}${mb.capped ? " (search capped)" : ""}${mb.note ? " — " + esc(mb.note) : ""}</p>`;
  if ((doc.suggestions || []).length) {
    h += `<h3>what would make it fit${doc.suggestions_batch_size ? " (at batch " + esc(doc.suggestions_batch_size) + ")" : ""}</h3>`;
    h += table([{ label: "change", t: 1 }, { label: "GB then" }, { label: "saves GB" }, { label: "fits", t: 1 }, { label: "flags", t: 1 }, { label: "note", t: 1, cls: "reason" }],
      doc.suggestions.map((s) => [esc(s.change), fmt(s.total_gb), fmt(s.saves_gb), s.fits ? "yes" : "no", `<code>${esc(s.how)}</code>`, esc(s.note || "")]), "suggestions");
  }
  if ((doc.parallel_layouts || []).length) {
    h += `<h3>tensor/pipeline parallel layouts that fit</h3>` + layoutTable(doc.parallel_layouts);
  }
  if (doc.parallel_layouts_note) h += `<p class="note">${esc(doc.parallel_layouts_note)}</p>`;
  el.insertAdjacentHTML("beforeend", h);
}

function layoutTable(items, id) {
  return table([{ label: "layout", t: 1 }, { label: "mb x acc" }, { label: "sharding", t: 1 }, { label: "recompute", t: 1 }, { label: "schedule", t: 1 },
    { label: "step s" }, { label: "tokens/s" }, { label: "MFU" }, { label: "peak GB" }, { label: "$ per step" }],
  items.map((p) => [esc(p.layout), `${esc(p.micro_batch)}x${esc(p.grad_accum)}`, esc(p.sharding), esc(p.recompute), esc(p.schedule),
    fmt(p.step_s), fmt(p.tokens_per_s), pct(p.mfu), fmt(p.peak_memory_gb), fmt(p.usd_per_step)]), id);
}

/* ---- Plan ------------------------------------------------------------------------------------- */

function renderPlan(doc, el) {
  let h = `<h2 id="result-title">${esc(doc.model)} on ${esc(doc.gpus)} x ${esc(doc.gpu_name)}: global batch ${esc(doc.global_batch)} x ${esc(doc.seq_len)} tokens, ${esc(doc.precision)}</h2>`;
  h += `<p class="note">${esc(doc.evaluated)} layouts evaluated; ${doc.usd_per_gpu_hour ? "$" + fmt(doc.usd_per_gpu_hour) + " per GPU-hour (catalog rental price)" : "no rental price"}</p>`;
  for (const n of doc.notes || []) h += `<p class="note plan-note">note: ${esc(n)}</p>`;
  h += layoutTable(doc.plans || [], "plans");
  if ((doc.plans || []).length) {
    h += `<h3>where the step goes (seconds)</h3>` + stackedBars(doc.plans.map((p, i) => ({ label: `#${i + 1} ${p.layout}`, parts: Object.entries(p.time_split_s || {}) })), "s", "plan-split");
  }
  el.insertAdjacentHTML("beforeend", h);
  const g = document.createElement("div");
  g.className = "gantt";
  g.id = "gantt";
  if (doc.gantt_svg) {
    const svg = new DOMParser().parseFromString(doc.gantt_svg, "image/svg+xml").documentElement;
    if (svg && svg.nodeName.toLowerCase() === "svg") g.appendChild(document.importNode(svg, true));
  } else {
    g.innerHTML = `<p class="note">the best layout has one pipeline stage: no schedule to draw (fix --pp 2 or more to see one)</p>`;
  }
  el.insertAdjacentHTML("beforeend", `<h3>pipeline schedule of #1</h3>`);
  el.appendChild(g);
  if ((doc.not_fitting || []).length) {
    el.insertAdjacentHTML("beforeend", `<details><summary>closest layouts that do not fit</summary>` +
      table([{ label: "layout", t: 1 }, { label: "mb x acc" }, { label: "sharding", t: 1 }, { label: "recompute", t: 1 },
        { label: "why", t: 1, cls: "reason" }],
        doc.not_fitting.map((p) => [esc(p.layout), `${fmt(p.micro_batch)} x ${fmt(p.grad_accum)}`, esc(p.sharding),
          esc(p.recompute || "none"), esc(p.reason)])) + `</details>`);
  }
}

/* ---- Serve ------------------------------------------------------------------------------------ */

function renderServe(doc, el) {
  const m = doc.memory || {};
  const s = doc.setup || {};
  const par = `TP${esc(s.tp)}${s.ep > 1 ? " EP" + esc(s.ep) : ""}${s.pp > 1 ? " PP" + esc(s.pp) : ""}${s.attention_dp > 1 ? " DP-attention " + esc(s.attention_dp) : ""}`;
  let h = `<h2 id="result-title">${esc(doc.model)} on ${esc(s.gpus)} x ${esc(doc.gpu_name)}: ${esc(s.engine)}, ${esc(s.precision)} weights, ${par}</h2>`;
  h += table([{ label: "", t: 1 }, { label: "requests/s" }, { label: "output tokens/s" }, { label: "per GPU" }, { label: "$ per M output tokens" }],
    [["total", fmt(doc.requests_per_s), fmt(doc.output_tokens_per_s), fmt(doc.output_tokens_per_s_per_gpu), fmt(doc.cost_per_million_output_tokens)]], "serve-summary");
  h += table([{ label: "ms", t: 1 }, { label: "mean" }, { label: "P50" }, { label: "P90" }, { label: "P99" }],
    ["ttft_ms", "tpot_ms", "e2e_ms"].map((k) => [k.replace("_ms", "").toUpperCase(), fmt((doc[k] || {}).mean), fmt((doc[k] || {}).p50), fmt((doc[k] || {}).p90), fmt((doc[k] || {}).p99)]), "latency");
  h += `<p class="note">weights ${fmt(m.weights_gb_per_gpu)} GB, KV cache ${fmt(m.kv_cache_gb)} GB (${fmt(doc.kv_cache_tokens)} tokens, max concurrency ${fmt(doc.max_concurrency)})</p>`;
  if (doc.slo) h += `<p id="slo"><b>SLO:</b> highest rate meeting it: ${doc.slo.max_rate_per_s === null ? "none" : fmt(doc.slo.max_rate_per_s) + " requests/s"}</p>`;
  el.insertAdjacentHTML("beforeend", h);
  const sw = doc.sweep || [];
  if (sw.length && typeof uPlot !== "undefined") {
    const p = "p" + ((doc.slo || {}).percentile || 90);
    el.insertAdjacentHTML("beforeend", `<h3>latency (${p.toUpperCase()}) against output tokens/s per GPU as the rate grows to saturation</h3>`);
    const box = chartBox(el, "serve-chart");
    const pts = sw.slice().sort((a, b) => a.output_tokens_per_s_per_gpu - b.output_tokens_per_s_per_gpu);
    plot({
      width: 900, height: 340,
      scales: { x: { time: false }, ttft: { auto: true }, tpot: { auto: true } },
      axes: [{ label: "output tokens/s per GPU" }, { scale: "ttft", label: `TTFT ${p} ms`, size: 70 },
        { scale: "tpot", side: 1, label: `TPOT ${p} ms`, grid: { show: false }, size: 70 }],
      series: [{ label: "tokens/s/GPU", value: (u, v) => fmt(v) },
        { label: `TTFT ${p} ms`, scale: "ttft", stroke: COLORS[0], width: 2, points: { show: true, size: 6 } },
        { label: `TPOT ${p} ms`, scale: "tpot", stroke: COLORS[1], width: 2, points: { show: true, size: 6 } }],
    }, [pts.map((q) => q.output_tokens_per_s_per_gpu), pts.map((q) => (q.ttft_ms || {})[p]), pts.map((q) => (q.tpot_ms || {})[p])], box);
    el.insertAdjacentHTML("beforeend", table([{ label: "requests/s" }, { label: "tokens/s/GPU" }, { label: `TTFT ${p}` }, { label: `TPOT ${p}` }, { label: (doc.setup || {}).engine === "sglang" ? "retractions" : "preemptions" }],
      pts.map((q) => [fmt(q.requests_per_s), fmt(q.output_tokens_per_s_per_gpu), fmt((q.ttft_ms || {})[p]), fmt((q.tpot_ms || {})[p]), fmt(q.preemptions)]), "sweep"));
  }
  if ((doc.notes || []).length) el.insertAdjacentHTML("beforeend", doc.notes.map((n) => `<p class="note">${esc(n)}</p>`).join(""));
}

/* ---- Serve: which GPUs for a rate ---------------------------------------------------------------- */

const layoutOf = (o) => `${o.replicas > 1 ? o.replicas + " x " : ""}${o.layout || "TP" + o.tp} ${o.gpu_name}`;

function renderServeRate(doc, el) {
  const a = doc.ask || {};
  const p = "P" + a.percentile, key = "_ms_p" + a.percentile;
  const ranked = doc.ranking || [], out = doc.not_meeting || [];
  const targets = [a.slo_ttft_ms !== null ? `TTFT ${p} ≤ ${fmt(a.slo_ttft_ms)} ms` : "",
    a.slo_tpot_ms !== null ? `TPOT ${p} ≤ ${fmt(a.slo_tpot_ms)} ms` : ""].filter((t) => t).join(" and ");
  let h = `<h2 id="result-title">${esc(a.model)} at ${fmt(a.rate_per_s)} requests/s (${esc(a.input_len)} prompt + ${esc(a.output_len)} answer tokens) with ${targets}: cheapest per million output tokens, ${esc(a.cost_mode)}</h2>`;
  h += `<p class="note">${esc(a.engine)}, ${esc(a.precision)} weights, at most ${esc(a.max_gpus)} GPUs</p>`;
  if (ranked.length) {
    h += table([{ label: "#" }, { label: "GPUs" }, { label: "layout", t: 1 }, { label: "max req/s per replica" }, { label: `TTFT ${p} ms` },
      { label: `TPOT ${p} ms` }, { label: "$/hour" }, { label: "$ per M output tokens" }],
    ranked.map((o, i) => [i + 1, esc(o.gpus), esc(layoutOf(o)), fmt(o.max_rate_per_s_per_replica) + (o.capped ? " (saturation)" : ""),
      fmt(o["ttft" + key]), fmt(o["tpot" + key]), fmt(o.usd_per_hour), fmt(o.usd_per_million_output_tokens)]), "serving-ranking");
    h += `<p class="note">price of #1: ${esc(ranked[0].price_source)}</p>`;
    const outside = [...new Set(ranked.filter((o) => !o.validated_gpu).map((o) => o.gpu_name))].sort();
    if (outside.length) {
      h += `<p class="note" id="validated-note">serving is validated on ${(doc.validated_on || []).map(esc).join(", ")} (<code>whichgpu validate-serve</code>); ${outside.map(esc).join(", ")} ${outside.length === 1 ? "is" : "are"} predicted outside that ground</p>`;
    }
    h += `<h3>$ per million output tokens</h3>` + stackedBars(ranked.map((o, i) => ({ label: `#${i + 1} ${layoutOf(o)}`,
      parts: [["$ per M output tokens", o.usd_per_million_output_tokens]] })), "$/M", "serving-cost");
  }
  if ((doc.more_meeting || []).length) h += `<p class="note">${doc.more_meeting.length} more configurations meet the targets at a higher cost (the JSON at /api/recommend-serving lists them)</p>`;
  if (out.length) {
    h += `<h3>${out.length} configurations are out</h3>` + table([{ label: "count" }, { label: "why", t: 1 }, { label: "for example", t: 1, cls: "reason" }],
      (doc.out_by_kind || []).map((k) => {
        const e = out.find((o) => o.reason_kind === k.kind) || {};
        return [esc(k.count), esc(k.label), `TP${esc(e.tp)} ${esc(e.gpu_name)}: ${esc(e.reason)}`];
      }), "serving-out");
    h += `<details><summary>every configuration that is out</summary>` + table([{ label: "layout", t: 1 }, { label: "why", t: 1, cls: "reason" }],
      out.map((o) => [esc(`TP${o.tp} ${o.gpu_name}`), esc(o.reason)])) + `</details>`;
  }
  h += `<p class="note">assumptions: ${Object.entries(doc.assumptions || {}).map(([k, v]) => `${esc(k)}: ${esc(v)}`).join("; ")}</p>`;
  el.insertAdjacentHTML("beforeend", h);
}

const RENDER = { recommend: renderRecommend, compare: renderCompare, fit: renderFit, plan: renderPlan, serve: renderServe,
  "serve-rate": renderServeRate };

/* ---- upload ------------------------------------------------------------------------------------ */

async function upload(file) {
  const status = $("upload-status");
  status.className = "";
  status.textContent = "uploading…";
  const body = new FormData();
  body.append("file", file, file.name);
  let res, doc;
  try {
    res = await fetch("/api/config", { method: "POST", body });
    doc = await res.json();
  } catch (e) {
    status.className = "error";
    status.textContent = "error: upload failed (" + e.message + ")";
    return;
  }
  if (!res.ok) {
    status.className = "error";
    status.id = "upload-status";
    status.textContent = "error: " + (doc.error || `HTTP ${res.status}`);
    return;
  }
  status.textContent = `${doc.filename}: ${doc.model_type} → ${doc.model}`;
  if (!state.uploads.some((u) => u.model === doc.model)) state.uploads.push({ model: doc.model, filename: doc.filename });
  state.params = { ...formParams(), model: doc.model };
  renderForm();
  writeHash();
  schedule(0);
}

/* ---- start ------------------------------------------------------------------------------------- */

async function start() {
  readHash();
  try {
    const res = await fetch("/api/models");
    state.models = (await res.json()).models || [];
  } catch (e) {
    state.models = [];
  }
  renderForm();
  writeHash();
  $("tabs").addEventListener("click", (ev) => {
    const page = ev.target.dataset && ev.target.dataset.page;
    if (!page || page === tabOf(state.page)) return;
    const keep = formParams();
    state.page = page;
    state.params = keep.model && keep.model.startsWith("upload:") ? { model: keep.model } : {};  // an upload follows
    renderForm();
    writeHash();
    schedule(0);
  });
  $("modes").addEventListener("click", (ev) => {
    const view = ev.target.dataset && ev.target.dataset.view;
    if (!view || view === state.page) return;
    const keep = formParams();  // the same question in the other view: the fields both have (a GPU list is not one GPU)
    state.page = view;
    state.params = {};
    for (const [name] of PAGES[view].fields) if (name !== "gpu" && keep[name]) state.params[name] = keep[name];
    renderForm();
    writeHash();
    schedule(0);
  });
  $("form").addEventListener("change", () => { state.params = formParams(); writeHash(); schedule(0); });
  $("form").addEventListener("input", (ev) => {
    if (ev.target.tagName === "INPUT") { state.params = formParams(); writeHash(); schedule(500); }
  });
  $("config-file").addEventListener("change", (ev) => { if (ev.target.files.length) upload(ev.target.files[0]); ev.target.value = ""; });
  window.addEventListener("hashchange", () => { readHash(); renderForm(); schedule(0); });
  schedule(0);
}

document.addEventListener("DOMContentLoaded", start);
