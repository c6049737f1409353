// fastmode dashboard: one EventSource, one render per sample. No framework, no build step.
"use strict";

const COLOURS = { ours: "#e8590c", tenants: "#4263eb", free: "#dee2e6", body: "#f1f3f5",
                  edge: "#adb5bd", wheel: "#495057", stop: "#868e96" };
const QUEUE_DOTS = 24;  // dots drawn at the stop; more are summarised as "+N"

function fmt(x, digits = 1) {
  if (x === null || x === undefined || !isFinite(x)) return "–";
  return Number(x).toLocaleString(undefined, { minimumFractionDigits: digits,
                                                 maximumFractionDigits: digits });
}
function fmtS(x) {
  if (x === null || x === undefined || !isFinite(x)) return "–";
  return x < 1 ? fmt(x * 1000, x < 0.01 ? 2 : 0) + " ms" : fmt(x, 2) + " s";
}
function usd(x, digits = 2) { return x === null || x === undefined ? "–" : "$" + fmt(x, digits); }
function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

// -- the fleet and the tiers -------------------------------------------------------------

function stat(label, value) {
  const d = el("div", "stat");
  d.append(el("div", "label", label), el("div", "value", value));
  return d;
}

function renderFleet(fleet) {
  const box = document.getElementById("fleet");
  box.replaceChildren();
  if (!fleet) { box.append(stat("fleet", "none")); return; }
  box.append(stat("policy", fleet.policy));
  for (const [name, g] of Object.entries(fleet.nodes)) {
    const bounds = g.max_count > g.count ? `${g.count}–${g.max_count}` : `${g.count}`;
    box.append(stat(`${name} nodes paid`, `${g.paid} of ${bounds}`));
  }
  const moving = Object.values(fleet.pools).reduce((n, p) => n + p.pending + p.draining, 0);
  box.append(stat("replicas moving", String(moving)));
  box.append(stat("node-hours", fmt(fleet.node_hours, 2)));
  box.append(stat("provider cost", `${usd(fleet.provider_cost_usd)} (${usd(fleet.provider_cost_usd_per_hour, 0)}/h)`));
  box.append(stat("revenue: yours", usd(fleet.revenue_usd.users)));
  box.append(stat("revenue: other tenants", usd(fleet.revenue_usd.tenants, 0)));
}

// host lag: time the machine (not the model) added to the streams, over the feed's window
function lagText(seconds) {
  return seconds > 0 ? `${fmtS(seconds)} slipped` : "none";
}

function renderTiers(tiers, windowS) {
  const box = document.getElementById("tiers");
  box.replaceChildren();
  for (const [name, t] of Object.entries(tiers)) {
    const card = el("div", "card");
    card.dataset.tier = name;
    card.dataset.requests = t.requests;
    const h = el("h3", null, name + " ");
    h.append(el("small", null, `${t.model} · $${fmt(t.price_output_per_mtok, 2)}/MTok out`));
    const rows = [
      ["tok/s per user", fmt(t.tokens_per_s_per_user_p50, 0)],
      ["TTFT (p50)", fmtS(t.ttft_p50_s)],
      [`host lag (${fmt(windowS, 0)} s)`, lagText(t.host_lag_s)],
      ["output tok/s (all)", fmt(t.output_tokens_per_s, 0)],
      ["requests", fmt(t.requests, 0)],
      ["billed", `${usd(t.cost_usd, 4)}`],
      ["billing now", `${usd(t.cost_usd_per_hour)}/h`],
    ];
    const table = el("table");
    for (const [k, v] of rows) {
      const tr = el("tr", k.startsWith("host lag") && t.host_lag_s > 0 ? "lag" : null);
      tr.append(el("td", null, k), el("td", null, v));
      table.append(tr);
    }
    card.append(h, table);
    box.append(card);
  }
}

// -- the buses -----------------------------------------------------------------------------

function busGeometry(seats) {
  const cols = Math.max(4, Math.ceil(Math.sqrt(seats * 2.2)));
  const rows = Math.ceil(seats / cols);
  const seat = Math.max(4, Math.min(11, Math.floor(230 / cols)));
  return { cols, rows, seat };
}

function drawBus(canvas, r, maxBatch) {
  const { cols, rows, seat } = busGeometry(maxBatch);
  const gap = seat > 6 ? 2 : 1;
  const stopW = 70, pad = 8;
  const bodyW = cols * (seat + gap) + gap + 2 * pad + 14;
  const bodyH = rows * (seat + gap) + gap + 2 * pad;
  const w = stopW + bodyW + 4, h = bodyH + 14;
  const dpr = window.devicePixelRatio || 1;
  canvas.width = w * dpr; canvas.height = h * dpr;
  canvas.style.width = w + "px"; canvas.style.height = h + "px";
  const g = canvas.getContext("2d");
  g.scale(dpr, dpr);
  // the stop: who waits for a seat
  g.fillStyle = COLOURS.stop;
  g.fillRect(stopW - 6, 4, 2, bodyH - 4);
  const waiting = [...Array(Math.min(r.waiting, QUEUE_DOTS)).fill(COLOURS.ours),
                   ...Array(Math.max(0, Math.min(r.tenants_waiting, QUEUE_DOTS - r.waiting)))
                     .fill(COLOURS.tenants)];
  waiting.forEach((c, i) => {
    g.fillStyle = c;
    g.beginPath();
    g.arc(stopW - 14 - (i % 6) * 9, 10 + Math.floor(i / 6) * 9, 3.2, 0, 2 * Math.PI);
    g.fill();
  });
  const extra = r.waiting + r.tenants_waiting - waiting.length;
  if (extra > 0) {
    g.fillStyle = COLOURS.wheel; g.font = "11px system-ui";
    g.fillText(`+${extra}`, 4, bodyH - 2);
  }
  // the bus
  const x0 = stopW;
  g.fillStyle = COLOURS.body; g.strokeStyle = COLOURS.edge; g.lineWidth = 1.5;
  g.beginPath();
  g.roundRect(x0, 2, bodyW, bodyH, [10, 16, 4, 4]);
  g.fill(); g.stroke();
  g.fillStyle = "#ced4da";
  g.fillRect(x0 + bodyW - 12, 10, 8, bodyH * 0.35);  // the windscreen
  const colours = [];
  for (let i = 0; i < r.ours; i++) colours.push(COLOURS.ours);
  for (let i = 0; i < r.tenants; i++) colours.push(COLOURS.tenants);
  while (colours.length < maxBatch) colours.push(COLOURS.free);
  colours.length = maxBatch;
  colours.forEach((c, i) => {
    const cx = x0 + pad + gap + (i % cols) * (seat + gap);
    const cy = 2 + pad + gap + Math.floor(i / cols) * (seat + gap);
    g.fillStyle = c;
    g.fillRect(cx, cy, seat, seat);
  });
  g.fillStyle = COLOURS.wheel;
  for (const wx of [x0 + 22, x0 + bodyW - 26]) {
    g.beginPath(); g.arc(wx, bodyH + 4, 6, 0, 2 * Math.PI); g.fill();
  }
}

function renderPools(pools) {
  const box = document.getElementById("pools");
  box.replaceChildren();
  for (const [name, p] of Object.entries(pools)) {
    const sec = el("section", "pool");
    sec.dataset.pool = name;
    const active = p.replicas.filter((r) => !r.retired).length;
    const h = el("h2", null, `${name} `);
    h.append(el("small", null,
      `${p.model} on ${p.hardware} · tiers ${p.tiers.join(", ")} · ${active} replica(s) of ${p.max_batch} seats`));
    if (p.pending) h.append(el("span", "badge", `+${p.pending} moving in`));
    if (p.host_lag_s > 0) {
      const badge = el("span", "badge lag",
        `host lag: ${fmtS(p.host_lag_s)} in ${p.host_lag_slips} slip(s) — streams slower than modeled`);
      badge.title = "The event loop served this pool's steps late (a busy host): the model's " +
        "timeline slipped by this much. Set stream_interval on a very fast tier, or run " +
        "more gateway processes (--workers).";
      h.append(badge);
    }
    sec.dataset.hostLag = String(p.host_lag_s);
    const draining = p.replicas.length - active;
    if (draining) h.append(el("span", "badge", `${draining} leaving`));
    const buses = el("div", "buses");
    for (const r of p.replicas) {
      const b = el("div", "bus" + (r.retired ? " retired" : ""));
      b.dataset.replica = r.name; b.dataset.ours = r.ours; b.dataset.tenants = r.tenants;
      const c = el("canvas");
      drawBus(c, r, p.max_batch);
      b.append(c, el("div", "caption",
        `${r.name}: ${r.ours} yours · ${r.tenants} tenants · ${r.free} free · ` +
        (r.step_ms > 0 ? `step ${fmt(r.step_ms, 2)} ms` : "idle")));
      buses.append(b);
    }
    sec.append(h, buses);
    box.append(sec);
  }
}

// -- the feed ------------------------------------------------------------------------------

function render(state) {
  renderFleet(state.fleet);
  renderTiers(state.tiers, state.window_s);
  renderPools(state.pools);
  document.getElementById("interval").textContent = state.interval_s;
  const n = Number(document.body.dataset.samples) + 1;
  document.body.dataset.samples = String(n);
}

function connect() {
  const status = document.getElementById("status");
  const source = new EventSource("/dashboard/feed");
  source.addEventListener("state", (ev) => {
    status.textContent = "live"; status.className = "pill live";
    render(JSON.parse(ev.data));
  });
  source.onerror = () => { status.textContent = "reconnecting…"; status.className = "pill wait"; };
}

connect();
