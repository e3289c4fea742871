// tasklock ui: draws the fleet the server sends at each change. Every key, name, reason
// and note is other agents' text: it is only ever set as text (textContent), never as
// markup.
"use strict";

const csrf = document.querySelector('meta[name="tasklock-csrf"]').content;
let doc = null;
let since = 3600;
let lastTimeline = 0;
let timelineTimer = null;
let colours = new Map();
// A table shows at most this many rows; the filter finds the others. A page of 10,000
// rows is slow to build and nobody reads it.
const MAX_ROWS = 300;

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

function row(cells) {
  const tr = document.createElement("tr");
  for (const c of cells) {
    const td = document.createElement("td");
    if (c instanceof Node) td.appendChild(c);
    else td.textContent = c === undefined || c === null ? "" : String(c);
    tr.appendChild(td);
  }
  return tr;
}

function dur(secs) {
  secs = Math.max(0, Math.round(secs));
  if (secs < 100) return secs + "s";
  if (secs < 6000) return Math.floor(secs / 60) + "m";
  return Math.floor(secs / 3600) + "h" + String(Math.floor((secs % 3600) / 60)).padStart(2, "0") + "m";
}

function secsBetween(a, b) {
  return (new Date(b) - new Date(a)) / 1000;
}

function label(id, name) {
  return name ? name + " (" + id + ")" : id;
}

function matches(...fields) {
  const f = document.getElementById("filter").value.toLowerCase();
  if (!f) return true;
  return fields.some((s) => (s || "").toLowerCase().includes(f));
}

function colourOf(id) {
  return colours.get(id) || "#888";
}

function swatch(id) {
  const s = el("span", null, "swatch");
  s.style.background = colourOf(id);
  return s;
}

function render() {
  if (!doc) return;
  const fl = doc.fleet;
  const now = doc.now;
  if (!fl) {
    document.getElementById("summary").textContent = doc.error ? "error: " + doc.error : "reading the store…";
    return;
  }
  const dead = fl.agents.filter((a) => a.state === "dead").length;
  const waiting = Object.values(fl.queues).reduce((n, q) => n + q.length, 0);
  const parts = [
    fl.checkouts.length + (fl.checkouts.length === 1 ? " checkout" : " checkouts"),
    fl.agents.length + (fl.agents.length === 1 ? " agent" : " agents") + (dead ? " (" + dead + " dead)" : ""),
  ];
  if (waiting) parts.push(waiting + " waiting");
  if (fl.cycles.length) parts.push(fl.cycles.length + (fl.cycles.length === 1 ? " deadlock" : " deadlocks"));
  if (fl.freezes.length) parts.push(fl.freezes.length + (fl.freezes.length === 1 ? " freeze" : " freezes"));
  parts.push(fl.store);
  if (doc.error) parts.push("error: " + doc.error);
  document.getElementById("summary").textContent = parts.join(" · ");

  const tbody = document.querySelector("#checkouts tbody");
  tbody.replaceChildren();
  colours = new Map((doc.colours || []).map((a) => [a.id, a.colour]));
  const shown = fl.checkouts.filter((c) => matches(c.key, c.agent.id, c.agent.name));
  const more = document.getElementById("more-checkouts");
  more.hidden = shown.length <= MAX_ROWS;
  more.textContent = "Showing " + MAX_ROWS + " of " + shown.length + " checkouts: filter to find the others.";
  for (const c of shown.slice(0, MAX_ROWS)) {
    const holder = el(
      "span",
      label(c.agent.id, c.agent.name) + (c.holder_client ? " · " + c.holder_client : ""),
      "state-" + c.holder_state
    );
    holder.prepend(swatch(c.agent.id));
    let lease;
    if (c.ending) {
      lease = el("span", c.ending === "timeout" ? "ending: lease over" : "ending: holder dead", "state-dead");
    } else {
      lease = el("span");
      const p = el("progress");
      const total = Math.max(1, secsBetween(c.renewed_at, c.expires_at));
      p.max = total;
      p.value = Math.max(0, secsBetween(now, c.expires_at));
      lease.append(p, " " + dur(secsBetween(now, c.expires_at)));
    }
    const actions = el("span");
    if (doc.can_act === null) {
      const r = el("button", "force-release", "act");
      r.addEventListener("click", () => act("release", c.key));
      const f = el("button", "freeze…", "act");
      f.addEventListener("click", () => act("freeze", c.key));
      actions.append(r, " ", f);
    }
    const keyCell = el("span", c.key);
    keyCell.addEventListener("click", () => showKey(c.key));
    tbody.appendChild(
      row([
        keyCell,
        holder,
        c.token,
        dur(secsBetween(c.acquired_at, now)),
        lease,
        c.slot ? c.slot + "/" + c.slots : "",
        (c.paths || []).join(" "),
        c.queued || "",
        c.reason || "",
        actions,
      ])
    );
  }
  document.getElementById("no-checkouts").hidden = shown.length > 0;

  const abody = document.querySelector("#agents tbody");
  abody.replaceChildren();
  const agents = fl.agents.filter((a) => matches(a.id, a.name, ...a.checkouts));
  const moreAgents = document.getElementById("more-agents");
  moreAgents.hidden = agents.length <= MAX_ROWS;
  moreAgents.textContent = "Showing " + MAX_ROWS + " of " + agents.length + " agents: filter to find the others.";
  for (const a of agents.slice(0, MAX_ROWS)) {
    const name = el("span", label(a.id, a.name) + (a.client ? " · " + a.client : ""));
    name.prepend(swatch(a.id));
    abody.appendChild(
      row([
        name,
        el("span", a.state === "dead" && a.cause ? "dead: " + a.cause : a.state, "state-" + a.state),
        a.last_heartbeat ? dur(secsBetween(a.last_heartbeat, now)) + " ago" : "never",
        a.checkouts.join(" "),
        a.waiting_for.join(" "),
        a.status || "",
      ])
    );
  }

  const waits = document.getElementById("waits");
  waits.replaceChildren();
  for (const c of fl.cycles) {
    waits.appendChild(el("li", "deadlock: " + c.concat([c[0]]).join(" → "), "cycle"));
  }
  for (const w of fl.waits.filter((w) => matches(w.waiter, w.key, w.blocker))) {
    const inCycle = fl.cycles.some((c) => c.includes(w.waiter) && c.includes(w.blocker));
    waits.appendChild(el("li", w.waiter + " waits for " + w.blocker + " on " + w.key, inCycle ? "cycle" : ""));
  }
  for (const f of fl.freezes) {
    waits.appendChild(
      el("li", "frozen: " + f.pattern + " for " + dur(secsBetween(now, f.until)) + " more" + (f.reason ? " (" + f.reason + ")" : ""), "frozen")
    );
  }
  if (!waits.children.length) waits.appendChild(el("li", "Nobody waits."));

  const tb = document.querySelector("#time tbody");
  tb.replaceChildren();
  for (const k of doc.time.keys) tb.appendChild(row([k.key, dur(k.held_secs), dur(k.waited_secs), k.contention]));
  const ab = document.querySelector("#agent-time tbody");
  ab.replaceChildren();
  for (const a of doc.time.agents) {
    const name = el("span", a.id);
    name.prepend(swatch(a.id));
    ab.appendChild(row([name, dur(a.held_secs), dur(a.waited_secs)]));
  }

  const events = document.getElementById("events");
  events.replaceChildren();
  for (const e of doc.events.filter((e) => matches(e.key, e.agent, e.event)).slice(0, 100)) {
    let t = e.ts.slice(11, 19) + " " + e.event + " " + e.key + " " + e.agent;
    if (e.token) t += " token " + e.token;
    if (e.reason) t += " (" + e.reason + ")";
    if (e.by) t += " by " + e.by;
    events.appendChild(el("li", t, "event-" + e.event));
  }
  refreshTimeline();
}

// The picture is redrawn by the server; at most every two seconds.
function refreshTimeline() {
  const wait = 2000 - (Date.now() - lastTimeline);
  if (wait > 0) {
    if (!timelineTimer) timelineTimer = setTimeout(() => { timelineTimer = null; refreshTimeline(); }, wait);
    return;
  }
  lastTimeline = Date.now();
  document.getElementById("timeline").src = "/timeline.svg?since=" + since + "&v=" + lastTimeline;
}

// A key in detail: why it can or cannot be taken, its notes, its history.
async function showKey(key) {
  const r = await fetch("/api/key?key=" + encodeURIComponent(key));
  if (!r.ok) {
    document.getElementById("message").textContent = r.status + " " + r.statusText;
    return;
  }
  const d = await r.json();
  document.getElementById("detail-key").textContent = d.key;
  const fill = (id, items, empty) => {
    const list = document.getElementById(id);
    list.replaceChildren();
    for (const t of items) list.appendChild(el("li", t));
    if (!items.length) list.appendChild(el("li", empty));
  };
  fill("detail-why", d.why, "");
  fill("detail-notes", d.notes || [d.notes_error || ""], "No notes for the next holder.");
  fill(
    "detail-history",
    d.history.map((e) => e.ts.slice(11, 19) + " " + e.event + " " + e.agent + (e.token ? " token " + e.token : "") + (e.reason ? " (" + e.reason + ")" : "")),
    "Nothing in the events kept."
  );
  const panel = document.getElementById("detail");
  panel.hidden = false;
  panel.scrollIntoView();
}

async function act(what, key) {
  let body = { key };
  if (what === "release") {
    if (!confirm("Force-release " + key + "? Its holder is told, and the release is audited.")) return;
  } else {
    const d = prompt("Freeze " + key + " for how long? (like 30m or 2h)", "30m");
    if (!d) return;
    body.for = d;
  }
  const r = await fetch("/api/" + what, {
    method: "POST",
    headers: { "Content-Type": "application/json", "X-Tasklock-Token": csrf },
    body: JSON.stringify(body),
  });
  let text;
  try {
    text = (await r.json()).message;
  } catch {
    text = r.status + " " + r.statusText;
  }
  document.getElementById("message").textContent = text;
}

function connect() {
  const live = document.getElementById("live");
  const es = new EventSource("/events");
  es.addEventListener("open", () => { live.textContent = "live"; live.className = "on"; });
  es.addEventListener("error", () => { live.textContent = "reconnecting…"; live.className = "off"; });
  es.addEventListener("fleet", (e) => { doc = JSON.parse(e.data); render(); });
}

document.getElementById("filter").addEventListener("input", render);
document.getElementById("detail-close").addEventListener("click", () => {
  document.getElementById("detail").hidden = true;
});
for (const b of document.querySelectorAll("#windows button")) {
  b.addEventListener("click", () => {
    since = Number(b.dataset.since);
    for (const o of document.querySelectorAll("#windows button")) o.classList.toggle("on", o === b);
    document.getElementById("save").href = "/timeline.svg?since=" + since + "&download=1";
    lastTimeline = 0;
    refreshTimeline();
  });
}
connect();
