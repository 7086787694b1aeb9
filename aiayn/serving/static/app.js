// aiayn's page: translate with POST /translate, then draw a sentence's attention (POST /attention) on canvases.
"use strict";

const $ = (id) => document.getElementById(id);
let current = null;          // the /attention answer on display
let selected = [0, 0];       // layer, head of the enlarged map

function headers() {
  const h = { "Content-Type": "application/json" };
  const key = $("api-key").value.trim();
  if (key) h["X-API-Key"] = key;
  return h;
}

async function call(path, body) {
  const r = await fetch(path, { method: "POST", headers: headers(), body: JSON.stringify(body) });
  const data = await r.json().catch(() => ({ error: `HTTP ${r.status}` }));
  if (!r.ok) throw new Error(data.error || `HTTP ${r.status}`);
  return data;
}

// the language pair picked, as the request fields that route it (several models served); {} with one model
function pair() {
  const value = $("pair").value;
  if (!value) return {};
  const [source, target] = value.split("|");
  return { source, target };
}

// the glossary box, "source term = target term" per line, as the request's glossary field ({} when empty)
function glossary() {
  const entries = {};
  for (const line of $("glossary").value.split("\n")) {
    const at = line.indexOf("=");
    if (at > 0 && line.slice(0, at).trim() && line.slice(at + 1).trim()) {
      entries[line.slice(0, at).trim()] = line.slice(at + 1).trim();
    }
  }
  return Object.keys(entries).length ? { glossary: entries } : {};
}

function status(text, isError = false) {
  $("status").textContent = text;
  $("status").className = isError ? "error" : "";
}

const UNSURE = 0.5;   // a line whose confidence is below this is marked for checking

async function translate() {
  const lines = $("source").value.split("\n");
  const beam = Math.max(1, Math.min(16, parseInt($("beam").value, 10) || 4));
  $("translate").disabled = true;
  status("translating…");
  const t0 = performance.now();
  try {
    const { translations, confidence, pivot } = await call("/translate", { text: lines, beam, ...pair(), ...glossary() });
    const list = $("translations");
    list.replaceChildren();
    translations.forEach((text, i) => {
      if (!lines[i].trim()) return;
      const li = document.createElement("li");
      li.dataset.source = lines[i];
      li.append(text);
      const sure = confidence ? confidence[i] : null;
      if (sure !== null && sure !== undefined) {
        // the calibrated probability that the line is acceptable (docs/confidence.md): under one half, marked
        li.dataset.confidence = sure;
        const badge = document.createElement("span");
        badge.className = "confidence";
        badge.textContent = `${Math.round(100 * sure)}%`;
        li.append(" ", badge);
        if (sure < UNSURE) {
          li.classList.add("unsure");
          li.title = "low confidence: check this translation";
        }
      }
      const src = document.createElement("span");
      src.className = "src";
      src.textContent = lines[i];
      li.append(src);
      const chosen = pair();
      li.onclick = () => showAttention(li, beam, chosen);
      list.append(li);
    });
    const via = pivot ? ` (through ${pivot.join(", ")})` : "";
    status(`${translations.length} lines in ${((performance.now() - t0) / 1000).toFixed(2)} s${via}`);
  } catch (e) {
    status(e.message, true);
  } finally {
    $("translate").disabled = false;
  }
}

async function showAttention(li, beam, chosen) {
  document.querySelectorAll("#translations li").forEach((x) => x.classList.toggle("selected", x === li));
  status("computing attention…");
  try {
    current = await call("/attention", { text: li.dataset.source, beam, ...chosen });
    selected = [0, 0];
    $("attention-sentence").textContent = `${li.dataset.source} → ${current.translation}`;
    $("attention-panel").hidden = false;
    draw();
    status("");
  } catch (e) {
    status(e.message, true);
  }
}

function labels(kind) {
  if (kind === "encoder") return [current.source, current.source];
  if (kind === "decoder_self") return [current.target_out, current.target_in];
  return [current.target_out, current.source];          // cross: each produced token over the source
}

function paint(canvas, map, cell) {
  const rows = map.length, cols = map[0].length;
  canvas.width = cols * cell;
  canvas.height = rows * cell;
  const ctx = canvas.getContext("2d");
  for (let r = 0; r < rows; r++) {
    for (let c = 0; c < cols; c++) {
      const v = map[r][c];                               // a probability in [0, 1]
      const shade = Math.round(255 * (1 - v));
      ctx.fillStyle = `rgb(${shade}, ${Math.round(255 - 140 * v)}, 255)`;
      ctx.fillRect(c * cell, r * cell, cell, cell);
    }
  }
}

function draw() {
  const kind = $("kind").value;
  const layers = current[kind];
  const grid = $("grid");
  grid.replaceChildren();
  grid.style.gridTemplateColumns = `repeat(${layers[0].length}, 1fr)`;
  layers.forEach((heads, l) => heads.forEach((map, h) => {
    const fig = document.createElement("figure");
    const canvas = document.createElement("canvas");
    canvas.className = "heatmap";
    paint(canvas, map, 4);
    fig.append(canvas, `layer ${l + 1} · head ${h + 1}`);
    fig.classList.toggle("selected", l === selected[0] && h === selected[1]);
    fig.onclick = () => { selected = [l, h]; draw(); };
    grid.append(fig);
  }));
  zoom(layers[selected[0]][selected[1]], ...labels(kind));
}

function zoom(map, rowLabels, colLabels) {
  const cell = 22, font = "12px system-ui, sans-serif";
  const canvas = $("zoom-canvas");
  const ctx = canvas.getContext("2d");
  ctx.font = font;
  const left = Math.max(...rowLabels.map((s) => ctx.measureText(s).width)) + 10;
  const top = Math.max(...colLabels.map((s) => ctx.measureText(s).width)) + 10;
  canvas.width = left + colLabels.length * cell;
  canvas.height = top + rowLabels.length * cell;
  ctx.font = font;
  ctx.fillStyle = "#fff";
  ctx.fillRect(0, 0, canvas.width, canvas.height);
  const heat = document.createElement("canvas");
  paint(heat, map, cell);
  ctx.drawImage(heat, left, top);
  ctx.fillStyle = "#1d2330";
  rowLabels.forEach((s, r) => ctx.fillText(s, left - 6 - ctx.measureText(s).width, top + r * cell + cell * 0.7));
  colLabels.forEach((s, c) => {
    ctx.save();
    ctx.translate(left + c * cell + cell * 0.7, top - 6);
    ctx.rotate(-Math.PI / 2);
    ctx.fillText(s, 0, 0);
    ctx.restore();
  });
}

async function describe() {
  try {
    const r = await fetch("/info", { headers: headers() });
    if (!r.ok) return;
    const info = await r.json();
    const models = info.models || [info];
    const picker = $("pair");
    const pivots = (info.pivots || []).map((c) => {     // pairs translated through a third language
      const option = document.createElement("option");
      option.value = `${c.source}|${c.target}`;
      option.textContent = `${c.source} → ${c.target} (via ${c.via.join(", ")})`;
      option.dataset.summary = `${c.source} → ${c.via.join(" → ")} → ${c.target}: two models, one after the other`;
      return option;
    });
    picker.replaceChildren(...models.map((m) => {
      const option = document.createElement("option");
      option.value = m.source ? `${m.source}|${m.target}` : "";
      option.textContent = m.source ? `${m.source} → ${m.target}` : (m.name || "model");
      option.dataset.summary = summary(m);
      return option;
    }), ...pivots);
    $("pair-label").hidden = models.length + pivots.length < 2;
    const show = () => { $("model-info").textContent = picker.selectedOptions[0]?.dataset.summary || ""; };
    picker.onchange = show;
    show();
  } catch (e) { /* the page works without it */ }
}

function summary(info) {
  const m = info.model, langs = info.source ? `${info.source} → ${info.target}, ` : "";
  return `${langs}d_model ${m.d_model}, ${m.n_enc_layers || m.n_layers}+${m.n_dec_layers || m.n_layers} layers, ` +
    `${m.n_heads} heads, ${(info.parameters / 1e6).toFixed(1)}M parameters, ${info.precision} on ${info.device}`;
}

$("translate").onclick = translate;
$("kind").onchange = () => current && draw();
describe();
