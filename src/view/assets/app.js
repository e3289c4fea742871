// tasklock ui: draws what the server sends at each change. The server filters, sorts and
// cuts each table to a page; the page sends its view (filter, sorts, pages) with its event
// stream, and opens another stream when the view changes. Every key, name, reason and
// note is other agents' text: it is only ever set as text (textContent), never as markup.
// The token: in the fragment of the URL `tasklock ui` printed (which the browser never
// sends), then in this tab's sessionStorage, which is this origin's alone (scheme, host
// and port): sent to this server only, as a header, or in the query where a script
// gives no headers (the event stream, the picture). No cookie: a browser would send
// one to every port of the host.
"use strict";

const token = (() => {
  const m = location.hash.match(/token=([0-9a-f]+)/);
  if (m) {
    sessionStorage.setItem("tasklock-token", m[1]);
    history.replaceState(null, "", location.pathname + location.search);
  }
  return sessionStorage.getItem("tasklock-token");
})();
const auth = "token=" + encodeURIComponent(token || "");
let doc = null;
let since = 3600;
let by = "key";
let lastTimeline = 0;
let timelineTimer = null;
let stream = null;
// Rows a table asks for at first, and how many more "show more" adds (the server sends
// at most 1,000 at a time; the filter finds the others).
const PAGE = 100;
const MOST = 1000;
const view = {
  filter: "",
  sort: { checkouts: "", agents: "" },
  limit: { checkouts: PAGE, agents: PAGE, waits: PAGE, events: PAGE },
};

function query() {
  const q = new URLSearchParams();
  if (view.filter) q.set("filter", view.filter);
  for (const [t, s] of Object.entries(view.sort)) if (s) q.set(t + ".sort", s);
  for (const [t, n] of Object.entries(view.limit)) if (n !== PAGE) q.set(t + ".limit", n);
  return q.toString();
}

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

function swatch(colour) {
  const s = el("span", null, "swatch");
  s.style.background = colour || "#888";
  return s;
}

// "Showing 100 of 10000 checkouts", and a button for more while there are more.
function more(id, part, noun) {
  const p = document.getElementById(id);
  p.replaceChildren();
  const shown = part.rows.length;
  p.hidden = shown >= part.matched;
  if (p.hidden) return;
  p.append("Showing " + shown + " of " + part.matched + " " + noun + (view.filter ? " matching the filter" : "") + ". ");
  const table = id.replace("more-", "");
  if (view.limit[table] < MOST) {
    const b = el("button", "show more", "more");
    b.addEventListener("click", () => {
      view.limit[table] = Math.min(MOST, view.limit[table] + PAGE * 2);
      connect();
    });
    p.append(b);
  } else {
    p.append("Filter to find the others.");
  }
}

function render() {
  if (!doc) return;
  const now = doc.now;
  const n = doc.counts;
  if (!doc.store) {
    document.getElementById("summary").textContent = doc.error ? "error: " + doc.error : "reading the store…";
    return;
  }
  const parts = [
    n.checkouts + (n.checkouts === 1 ? " checkout" : " checkouts"),
    n.agents + (n.agents === 1 ? " agent" : " agents") + (n.dead ? " (" + n.dead + " dead)" : ""),
  ];
  if (n.waiting) parts.push(n.waiting + " waiting");
  if (n.cycles) parts.push(n.cycles + (n.cycles === 1 ? " deadlock" : " deadlocks"));
  if (n.freezes) parts.push(n.freezes + (n.freezes === 1 ? " freeze" : " freezes"));
  parts.push(doc.store);
  if (doc.error) parts.push("error: " + doc.error);
  document.getElementById("summary").textContent = parts.join(" · ");

  for (const th of document.querySelectorAll("th[data-sort]")) {
    const s = view.sort[th.closest("table").id];
    th.classList.toggle("sorted", s === th.dataset.sort);
    th.classList.toggle("sorted-back", s === "-" + th.dataset.sort);
  }

  const tbody = document.querySelector("#checkouts tbody");
  const rows = [];
  for (const c of doc.checkouts.rows) {
    const holder = el(
      "span",
      label(c.agent.id, c.agent.name) + (c.holder_client ? " · " + c.holder_client : ""),
      "state-" + c.holder_state
    );
    holder.prepend(swatch(c.colour));
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
    rows.push(
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
  tbody.replaceChildren(...rows);
  const none = document.getElementById("no-checkouts");
  none.hidden = doc.checkouts.matched > 0;
  none.textContent = n.checkouts ? "No checkout matches the filter." : "No active checkouts.";
  more("more-checkouts", doc.checkouts, "checkouts");

  const abody = document.querySelector("#agents tbody");
  const arows = [];
  for (const a of doc.agents.rows) {
    const name = el("span", label(a.id, a.name) + (a.client ? " · " + a.client : ""));
    name.prepend(swatch(a.colour));
    arows.push(
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
  abody.replaceChildren(...arows);
  more("more-agents", doc.agents, "agents");

  const waits = document.getElementById("waits");
  const items = [];
  for (const c of doc.cycles) {
    items.push(el("li", "deadlock: " + c.concat([c[0]]).join(" → "), "cycle"));
  }
  for (const w of doc.waits.rows) {
    const inCycle = doc.cycles.some((c) => c.includes(w.waiter) && c.includes(w.blocker));
    items.push(el("li", w.waiter + " waits for " + w.blocker + " on " + w.key, inCycle ? "cycle" : ""));
  }
  for (const f of doc.freezes) {
    items.push(
      el("li", "frozen: " + f.pattern + " for " + dur(secsBetween(now, f.until)) + " more" + (f.reason ? " (" + f.reason + ")" : ""), "frozen")
    );
  }
  if (!items.length) items.push(el("li", "Nobody waits."));
  waits.replaceChildren(...items);
  more("more-waits", doc.waits, "waits");

  const tb = document.querySelector("#time tbody");
  tb.replaceChildren();
  for (const k of doc.time.keys) tb.appendChild(row([k.key, dur(k.held_secs), dur(k.waited_secs), k.contention]));
  const ab = document.querySelector("#agent-time tbody");
  ab.replaceChildren();
  for (const a of doc.time.agents) {
    const name = el("span", a.id);
    name.prepend(swatch(a.colour));
    ab.appendChild(row([name, dur(a.held_secs), dur(a.waited_secs)]));
  }

  const events = document.getElementById("events");
  const lines = [];
  for (const e of doc.events.rows) {
    let t = e.ts.slice(11, 19) + " " + e.event + " " + e.key + " " + e.agent;
    if (e.token) t += " token " + e.token;
    if (e.reason) t += " (" + e.reason + ")";
    if (e.by) t += " by " + e.by;
    lines.push(el("li", t, "event-" + e.event));
  }
  events.replaceChildren(...lines);
  more("more-events", doc.events, "events");
  if (!performance.getEntriesByName("tasklock-first-rows").length) {
    // The rows are laid out (reading a size makes the browser do it now): the mark
    // bench/ui.py reads, from the start of the navigation.
    void document.body.offsetHeight;
    performance.mark("tasklock-first-rows");
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
  document.getElementById("timeline").src = "/timeline.svg?" + auth + "&since=" + since + "&by=" + by + "&v=" + lastTimeline;
}

// A key in detail: why it can or cannot be taken, its notes, its history.
async function showKey(key) {
  const r = await fetch("/api/key?key=" + encodeURIComponent(key), { headers: { "X-Tasklock-Token": token } });
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
    headers: { "Content-Type": "application/json", "X-Tasklock-Token": token },
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

// The stream carries the page's view: a new view, a new stream (the server sends the
// view of the current fleet at once).
function connect() {
  const live = document.getElementById("live");
  if (stream) stream.close();
  const q = query();
  stream = new EventSource("/events?" + auth + (q ? "&" + q : ""));
  stream.addEventListener("open", () => { live.textContent = "live"; live.className = "on"; });
  stream.addEventListener("error", () => { live.textContent = "reconnecting…"; live.className = "off"; });
  stream.addEventListener("fleet", (e) => { doc = JSON.parse(e.data); render(); });
}

let typing = null;
document.getElementById("filter").addEventListener("input", (e) => {
  clearTimeout(typing);
  typing = setTimeout(() => {
    view.filter = e.target.value;
    for (const t of Object.keys(view.limit)) view.limit[t] = PAGE;
    connect();
  }, 120);
});
for (const th of document.querySelectorAll("th[data-sort]")) {
  th.addEventListener("click", () => {
    const t = th.closest("table").id;
    view.sort[t] = view.sort[t] === th.dataset.sort ? "-" + th.dataset.sort : th.dataset.sort;
    view.limit[t] = PAGE;
    connect();
  });
}
document.getElementById("detail-close").addEventListener("click", () => {
  document.getElementById("detail").hidden = true;
});
for (const b of document.querySelectorAll("#windows button")) {
  b.addEventListener("click", () => {
    const group = b.dataset.by ? "#by button" : "#windows button[data-since]";
    if (b.dataset.by) by = b.dataset.by;
    else since = Number(b.dataset.since);
    for (const o of document.querySelectorAll(group)) o.classList.toggle("on", o === b);
    saveLink();
    lastTimeline = 0;
    refreshTimeline();
  });
}
function saveLink() {
  document.getElementById("save").href = "/timeline.svg?" + auth + "&since=" + since + "&by=" + by + "&download=1";
}

// The printed URL opened over this page (only its fragment changed: no new load).
window.addEventListener("hashchange", () => {
  if (/token=/.test(location.hash)) location.reload();
});
if (token) {
  saveLink();
  connect();
} else {
  document.getElementById("summary").textContent =
    "this page needs its token: open the URL `tasklock ui` printed (http://…/#token=…)";
}
