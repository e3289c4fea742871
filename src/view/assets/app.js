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
// The timeline's window: "all" (fitted to what happened) or seconds.
let since = "all";
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
// The small tables the page has whole sort here: a column, `-` before it for the other
// way round.
const local = { time: "-contention", "agent-time": "-total" };

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

// The names of a table's columns.
const heads = {};
function headsOf(table) {
  if (!heads[table]) heads[table] = [...document.querySelectorAll("#" + table + " thead th")].map((th) => th.textContent.trim());
  return heads[table];
}

// A row of cells, each labelled with its column's name (shown before it on a phone).
function row(cells, table, classes) {
  const names = headsOf(table);
  const tr = document.createElement("tr");
  cells.forEach((c, i) => {
    const td = document.createElement("td");
    if (c instanceof Node) td.appendChild(c);
    else if (c !== undefined && c !== null && c !== "") td.textContent = String(c);
    if (names[i]) td.dataset.label = names[i];
    if (classes && classes[i]) td.className = classes[i];
    tr.appendChild(td);
  });
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

// An agent as the command line names it: its id, then its label.
function label(id, name) {
  return name ? id + " (" + name + ")" : id;
}

function swatch(colour) {
  const s = el("span", null, "swatch");
  s.style.background = colour || "#888";
  return s;
}

function keyEl(k) {
  const s = el("span", k, "key");
  s.title = k;
  return s;
}

function who(id, name, colour, extra) {
  const s = el("span", label(id, name) + (extra || ""), "name");
  if (colour) s.prepend(swatch(colour));
  return s;
}

// An empty table says what to do instead of showing its headers alone.
function empty(table, id, text) {
  const none = document.getElementById(id);
  const rows = document.querySelectorAll("#" + table + " tbody tr").length;
  document.getElementById(table).hidden = rows === 0;
  none.hidden = rows > 0;
  if (text instanceof Node) none.replaceChildren(text);
  else none.replaceChildren(...said(text));
}

// Text with `code` in back-quotes, as nodes.
function said(text) {
  return String(text).split("`").map((part, i) => (i % 2 ? el("code", part) : document.createTextNode(part)));
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
    b.type = "button";
    b.addEventListener("click", () => {
      view.limit[table] = Math.min(MOST, view.limit[table] + PAGE * 2);
      connect();
    });
    p.append(b);
  } else {
    p.append("Filter to find the others.");
  }
}

// Each sortable header says how its table is sorted: ▲ or ▼, and aria-sort.
function marks() {
  for (const th of document.querySelectorAll("th[data-sort]")) {
    const t = th.closest("table");
    const s = t.classList.contains("local") ? local[t.id] : view.sort[t.id];
    const up = s === th.dataset.sort;
    const down = s === "-" + th.dataset.sort;
    th.classList.toggle("sorted", up);
    th.classList.toggle("sorted-back", down);
    th.setAttribute("aria-sort", up ? "ascending" : down ? "descending" : "none");
  }
}

function render() {
  if (!doc) return;
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
  marks();
  renderCheckouts();
  renderAgents();
  renderWaits();
  renderTime();
  renderEvents();
  if (!performance.getEntriesByName("tasklock-first-rows").length) {
    // The rows are laid out (reading a size makes the browser do it now): the mark
    // bench/ui.py reads, from the start of the navigation.
    void document.body.offsetHeight;
    performance.mark("tasklock-first-rows");
  }
  refreshTimeline();
}

function lease(c, now) {
  if (c.ending) return el("span", c.ending === "timeout" ? "ending: lease over" : "ending: holder dead", "state-dead nowrap");
  const span = el("span", null, "nowrap");
  const p = el("progress");
  p.max = Math.max(1, secsBetween(c.renewed_at, c.expires_at));
  p.value = Math.max(0, secsBetween(now, c.expires_at));
  span.append(p, " " + dur(secsBetween(now, c.expires_at)));
  return span;
}

// A checkout's git worktree: its path, whole (as keys are), its branch on hover.
function worktreeEl(w) {
  const e = keyEl(w.path);
  e.title = "branch " + w.branch;
  return e;
}

function renderCheckouts() {
  const now = doc.now;
  const rows = [];
  for (const c of doc.checkouts.rows) {
    const holder = who(c.agent.id, c.agent.name, c.colour, c.holder_client ? " · " + c.holder_client : "");
    holder.classList.add("state-" + c.holder_state);
    const actions = el("span", null, "nowrap");
    if (doc.can_act === null) {
      const r = el("button", "force-release", "act danger");
      r.addEventListener("click", () => act("release", c.key));
      const f = el("button", "freeze…", "act");
      f.addEventListener("click", () => act("freeze", c.key));
      actions.append(r, " ", f);
    }
    const key = keyEl(c.key);
    key.addEventListener("click", () => showKey(c.key));
    const paths = el("span");
    for (const p of c.paths || []) paths.append(keyEl(p), " ");
    rows.push(
      row(
        [key, holder, c.token, el("span", dur(secsBetween(c.acquired_at, now)), "nowrap"), lease(c, now),
          c.slot ? c.slot + "/" + c.slots : "", (c.paths || []).length ? paths : "", c.queued || "",
          c.worktree ? worktreeEl(c.worktree) : "", c.reason || "",
          actions.childNodes.length ? actions : ""],
        "checkouts",
        ["", "", "num", "", "", "", "paths", "num", "paths", "reason", ""]
      )
    );
  }
  document.querySelector("#checkouts tbody").replaceChildren(...rows);
  empty("checkouts", "no-checkouts", doc.counts.checkouts
    ? "No checkout matches the filter."
    : "No checkouts. An agent takes one with `tasklock checkout KEY`.");
  more("more-checkouts", doc.checkouts, "checkouts");
}

function renderAgents() {
  const now = doc.now;
  const rows = [];
  for (const a of doc.agents.rows) {
    const keys = (list) => {
      const s = el("span");
      for (const k of list) s.append(keyEl(k), " ");
      return list.length ? s : "";
    };
    rows.push(
      row(
        [who(a.id, a.name, a.colour, a.client ? " · " + a.client : ""),
          el("span", a.state === "dead" && a.cause ? "dead: " + a.cause : a.state, "nowrap state-" + a.state),
          a.last_heartbeat ? dur(secsBetween(a.last_heartbeat, now)) + " ago" : "never",
          keys(a.checkouts), keys(a.waiting_for), a.status || ""],
        "agents",
        ["", "", "nowrap", "paths", "paths", "reason"]
      )
    );
  }
  document.querySelector("#agents tbody").replaceChildren(...rows);
  empty("agents", "no-agents", doc.counts.agents
    ? "No agent matches the filter."
    : "No agents yet. An agent shows here once it runs tasklock, for example `tasklock checkout KEY`.");
  more("more-agents", doc.agents, "agents");
}

function renderWaits() {
  const now = doc.now;
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
  if (!items.length) items.push(el("li", "Nobody waits.", "empty"));
  document.getElementById("waits").replaceChildren(...items);
  more("more-waits", doc.waits, "waits");
}

// Sorted by the column asked for (numbers as numbers), the other way round after `-`.
function sortLocal(table, rows) {
  const s = local[table] || "";
  const col = s.replace(/^-/, "");
  const sign = s.startsWith("-") ? -1 : 1;
  return rows.slice().sort((a, b) => {
    const x = a[col], y = b[col];
    const o = typeof x === "number" ? x - y : String(x).localeCompare(String(y));
    return sign * o || String(a.key || a.agent).localeCompare(String(b.key || b.agent));
  });
}

function renderTime() {
  const t = doc.time || { keys: [], agents: [] };
  const keys = sortLocal("time", t.keys.map((k) => ({ key: k.key, held: k.held_secs, waited: k.waited_secs, contention: k.contention })));
  document.querySelector("#time tbody").replaceChildren(
    ...keys.map((k) => row([keyEl(k.key), dur(k.held), dur(k.waited), k.contention], "time", ["", "num", "num", "num"]))
  );
  const colours = Object.fromEntries(t.agents.map((a) => [a.id, a.colour]));
  const agents = sortLocal("agent-time", t.agents.map((a) => ({ agent: a.id, held: a.held_secs, waited: a.waited_secs, total: a.held_secs + a.waited_secs })));
  document.querySelector("#agent-time tbody").replaceChildren(
    ...agents.map((a) => row([who(a.agent, null, colours[a.agent]), dur(a.held), dur(a.waited), dur(a.total)], "agent-time", ["", "num", "num", "num"]))
  );
  const window = t.start ? "since " + new Date(t.start).toISOString().slice(11, 16) + " UTC (" + dur(secsBetween(t.start, t.end)) + ")" : "";
  document.getElementById("time-window").textContent = window;
  document.getElementById("agent-time").hidden = !agents.length;
  empty("time", "no-time", "Nothing held or waited for in this window.");
}

// An event in words: who did what, to which key.
// An event's sentence is the server's (the words of `tasklock top` and the webhooks); the
// key in it opens the key's detail.
function told(e) {
  const i = e.key ? e.text.indexOf(e.key) : -1;
  if (i < 0) return [e.text];
  return [e.text.slice(0, i), keyEl(e.key), e.text.slice(i + e.key.length)];
}

function eventItem(e) {
  const li = el("li", null, "ev-" + e.event);
  const t = el("time", e.ts.slice(11, 19));
  t.dateTime = e.ts;
  const what = el("span");
  what.append(...told(e).filter((p) => p !== ""));
  li.append(t, what);
  if (/^(deny|deadlock|force_release|refused)$/.test(e.event) || (e.event === "auto_release" && e.reason === "agent_death")) li.classList.add("ev-bad");
  if (/^(renew|notify|push)$/.test(e.event)) li.classList.add("ev-note");
  return li;
}

// Desktop notifications: the events the server marks `notify` (what a webhook would be
// told), new since the page last looked, at most three at once; asked for by a click.
const notifying = { on: false, seen: null };
function eventId(e) { return e.ts + " " + e.event + " " + e.key + " " + e.agent; }
function tellDesktop(rows) {
  const ids = rows.map(eventId);
  if (notifying.on && notifying.seen) {
    const fresh = rows.filter((e) => e.notify && !notifying.seen.has(eventId(e))).reverse();
    for (const e of fresh.slice(0, 3)) new Notification("tasklock", { body: e.text, tag: eventId(e) });
    if (fresh.length > 3) new Notification("tasklock", { body: "and " + (fresh.length - 3) + " more: see the page" });
  }
  notifying.seen = new Set(ids);
}
(function notifyButton() {
  const b = document.getElementById("notify");
  if (!("Notification" in window)) return;
  b.hidden = false;
  const show = () => {
    notifying.on = Notification.permission === "granted" && localStorage.getItem("tasklock-notify") === "on";
    b.classList.toggle("on", notifying.on);
    b.textContent = notifying.on ? "Notifying" : "Notify me";
    b.setAttribute("aria-pressed", String(notifying.on));
  };
  b.addEventListener("click", async () => {
    if (notifying.on) {
      localStorage.setItem("tasklock-notify", "off");
    } else if ((await Notification.requestPermission()) === "granted") {
      localStorage.setItem("tasklock-notify", "on");
    }
    show();
  });
  show();
})();

function renderEvents() {
  tellDesktop(doc.events.rows);
  const list = document.getElementById("events");
  list.replaceChildren(...doc.events.rows.map(eventItem));
  const none = document.getElementById("no-events");
  none.hidden = doc.events.rows.length > 0;
  list.hidden = !none.hidden;
  none.textContent = view.filter ? "No event matches the filter." : "No events yet. Checkouts, waits and releases show here as they happen.";
  more("more-events", doc.events, "events");
}

// The picture is redrawn by the server; at most every two seconds.
function timelineUrl() {
  return "/timeline.svg?" + auth + "&since=" + since + "&by=" + by;
}

function refreshTimeline() {
  const wait = 2000 - (Date.now() - lastTimeline);
  if (wait > 0) {
    if (!timelineTimer) timelineTimer = setTimeout(() => { timelineTimer = null; refreshTimeline(); }, wait);
    return;
  }
  lastTimeline = Date.now();
  document.getElementById("timeline").src = timelineUrl() + "&v=" + lastTimeline;
  document.getElementById("save").href = timelineUrl() + "&download=1";
  document.getElementById("save-html").href = timelineUrl().replace("/timeline.svg", "/timeline.html") + "&download=1";
  const t = doc && doc.time;
  const fitted = t && t.start ? Math.max(0, secsBetween(t.start, t.end)) : 0;
  document.getElementById("span").textContent = since !== "all"
    ? "The last " + stretch(since) + "."
    : !t || !t.start ? ""
    : t.keys.length ? "From the first thing shown to now (" + dur(fitted) + ")."
    : "Nothing yet: the last " + stretch(fitted) + ".";
}

// A window's length as people say it: 15m, 1h, 6h, 2d, or 1h30m.
function stretch(secs) {
  secs = Math.round(secs);
  if (secs % 86400 === 0) return secs / 86400 + "d";
  if (secs % 3600 === 0) return secs / 3600 + "h";
  if (secs < 3600 && secs % 60 === 0) return secs / 60 + "m";
  return dur(secs);
}

// The window shown, in seconds (for "all": the fitted one the server sent).
function shownSecs() {
  if (since !== "all") return since;
  const t = doc && doc.time;
  return t && t.start ? Math.max(60, secsBetween(t.start, t.end)) : 3600;
}

function setWindow(s) {
  since = s === "all" ? "all" : Math.min(7 * 86400, Math.max(60, Math.round(s)));
  for (const o of document.querySelectorAll("#windows button[data-since]")) o.classList.toggle("on", o.dataset.since === String(since));
  lastTimeline = 0;
  refreshTimeline();
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
    if (!items.length) list.appendChild(el("li", empty, "empty"));
  };
  fill("detail-why", d.why, "");
  fill("detail-notes", d.notes || [d.notes_error || ""], "No notes for the next holder.");
  const history = document.getElementById("detail-history");
  history.replaceChildren(...d.history.map(eventItem));
  if (!d.history.length) history.appendChild(el("li", "Nothing in the events kept.", "empty"));
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

// The connection: "connecting…" at first (never "offline" before a try failed), "live"
// once the stream is open, "reconnecting…" while the browser tries again, and
// "offline" only when that has not worked for a while.
const OFFLINE_AFTER = 6000;
let offlineTimer = null;
function status(state, text) {
  const live = document.getElementById("live");
  live.className = state;
  live.textContent = text;
}
function offlineSoon() {
  if (offlineTimer) return;
  offlineTimer = setTimeout(() => {
    offlineTimer = null;
    status("offline", "offline");
  }, OFFLINE_AFTER);
}
function settle(state, text) {
  clearTimeout(offlineTimer);
  offlineTimer = null;
  status(state, text);
}

// The stream carries the page's view: a new view, a new stream (the server sends the
// view of the current fleet at once).
function connect() {
  if (stream) stream.close();
  // Another view shows other rows: none of them is news.
  notifying.seen = null;
  const q = query();
  const s = new EventSource("/events?" + auth + (q ? "&" + q : ""));
  stream = s;
  if (document.getElementById("live").className !== "live") offlineSoon();
  s.addEventListener("open", () => settle("live", "live"));
  s.addEventListener("error", () => {
    if (stream !== s) return;
    if (s.readyState === EventSource.CLOSED) {
      settle("offline", "offline");
    } else {
      if (document.getElementById("live").className === "live") status("reconnecting", "reconnecting…");
      offlineSoon();
    }
  });
  s.addEventListener("fleet", (e) => { doc = JSON.parse(e.data); render(); });
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
// A click on a column sorts by it; another click, the other way round.
for (const th of document.querySelectorAll("th[data-sort]")) {
  th.tabIndex = 0;
  const sort = () => {
    const table = th.closest("table");
    const t = table.id;
    const sorts = table.classList.contains("local") ? local : view.sort;
    sorts[t] = sorts[t] === th.dataset.sort ? "-" + th.dataset.sort : th.dataset.sort;
    if (sorts === local) {
      marks();
      if (doc) renderTime();
    } else {
      view.limit[t] = PAGE;
      connect();
    }
  };
  th.addEventListener("click", sort);
  th.addEventListener("keydown", (e) => {
    if (e.key === "Enter" || e.key === " ") {
      e.preventDefault();
      sort();
    }
  });
}
document.getElementById("detail-close").addEventListener("click", () => {
  document.getElementById("detail").hidden = true;
});
for (const b of document.querySelectorAll("#windows button[data-since]")) {
  b.addEventListener("click", () => setWindow(b.dataset.since === "all" ? "all" : Number(b.dataset.since)));
}
document.getElementById("zoom-in").addEventListener("click", () => setWindow(shownSecs() / 2));
document.getElementById("zoom-out").addEventListener("click", () => setWindow(shownSecs() * 2));
for (const b of document.querySelectorAll("#by button")) {
  b.addEventListener("click", () => {
    by = b.dataset.by;
    for (const o of document.querySelectorAll("#by button")) o.classList.toggle("on", o === b);
    lastTimeline = 0;
    refreshTimeline();
  });
}

// The printed URL opened over this page (only its fragment changed: no new load).
window.addEventListener("hashchange", () => {
  if (/token=/.test(location.hash)) location.reload();
});
marks();
if (token) {
  document.getElementById("save").href = timelineUrl() + "&download=1";
  document.getElementById("save-html").href = timelineUrl().replace("/timeline.svg", "/timeline.html") + "&download=1";
  connect();
} else {
  status("offline", "no token");
  document.getElementById("summary").textContent =
    "this page needs its token: open the URL `tasklock ui` printed (http://…/#token=…)";
}
