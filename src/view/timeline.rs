//! A picture of how the work flowed: for each key, the holds (coloured by agent), the
//! waits in its queue, deaths and force-releases, and freezes, over a window of time;
//! and where the time went (held against waited, the most contended keys). Built from
//! the audit log's events and the fleet as it is now; drawn as SVG, with every key,
//! name and reason escaped as text.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write;

use serde::Serialize;

use crate::clock::Time;
use crate::engine::fleet::Fleet;
use crate::store::{AuditEvent, Event};

/// At most this many keys are drawn: the busiest.
pub const MAX_ROWS: usize = 40;

/// What a row of the timeline is: a key (its holders and waiters) or an agent (what it
/// held and waited for).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum By {
    #[default]
    Key,
    Agent,
}

#[derive(Debug, Clone, Serialize)]
pub struct Timeline {
    pub start: Time,
    pub end: Time,
    pub by: By,
    pub rows: Vec<KeyRow>,
    /// Agents in the order they first appear, with their colour.
    pub agents: Vec<AgentColour>,
    /// Where the time went, per agent.
    pub agent_time: Vec<AgentTime>,
    /// The colour of every agent in view: the fleet's, then the events'.
    #[serde(skip)]
    pub colours: super::palette::Colours,
}

impl Timeline {
    /// An agent's colour, as `#rrggbb`.
    pub fn colour(&self, id: &str) -> String {
        self.colours.hex(id)
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct AgentColour {
    pub id: String,
    pub colour: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct KeyRow {
    /// The key; in a timeline by agent, the agent.
    pub key: String,
    pub holds: Vec<Span>,
    pub waits: Vec<Span>,
    pub marks: Vec<Mark>,
    pub frozen: Vec<(Time, Time)>,
    /// Seconds held, summed over holds (slots count each).
    pub held_secs: i64,
    /// Seconds agents spent queued for it.
    pub waited_secs: i64,
    /// Queue joins and refusals: how contended it was (by agent: its waits).
    pub contention: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct Span {
    pub agent: String,
    /// In a timeline by agent: the key held or waited for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub on: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token: Option<u64>,
    pub from: Time,
    pub to: Time,
    /// Still going at the end of the window.
    pub open: bool,
    /// How it ended, when it did: `release`, `auto_release`, `force_release`, `acquire`
    /// (a wait that was granted), `dequeue`, …
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ended_by: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Mark {
    pub at: Time,
    /// `death`, `force_release`, `handoff` or `deadlock`.
    pub kind: &'static str,
    pub agent: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct AgentTime {
    pub id: String,
    pub held_secs: i64,
    pub waited_secs: i64,
}

fn secs(a: Time, b: Time) -> i64 {
    (b - a).num_seconds().max(0)
}

/// The window a timeline shows, up to its end (now).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Window {
    /// The last this many seconds.
    Last(i64),
    /// From the first thing it shows, at most `FIT_MAX` seconds back, to the end: what
    /// happened, not a fixed stretch of which it fills a sliver.
    Fit,
}

/// How far back a fitted timeline looks, at most.
pub const FIT_MAX: i64 = 86_400;
/// The shortest fitted timeline, and the one with nothing to show.
pub const FIT_MIN: i64 = 60;
const FIT_EMPTY: i64 = 900;

/// The timeline of the window `[start, end]`, one row per key.
pub fn build(events: &[AuditEvent], fleet: Option<&Fleet>, start: Time, end: Time) -> Timeline {
    build_by(events, fleet, start, end, By::Key)
}

/// The timeline of the window `[start, end]`, one row per key or per agent.
pub fn build_by(
    events: &[AuditEvent],
    fleet: Option<&Fleet>,
    start: Time,
    end: Time,
    by: By,
) -> Timeline {
    build_in(events, fleet, Some(start), end, by)
}

/// The timeline of a window ending at `end`, one row per key or per agent.
pub fn build_window(
    events: &[AuditEvent],
    fleet: Option<&Fleet>,
    window: Window,
    end: Time,
    by: By,
) -> Timeline {
    match window {
        Window::Last(secs) => build_in(
            events,
            fleet,
            Some(end - chrono::Duration::seconds(secs)),
            end,
            by,
        ),
        Window::Fit => build_in(events, fleet, None, end, by),
    }
}

/// `start` none: fitted to what the replay found.
fn build_in(
    events: &[AuditEvent],
    fleet: Option<&Fleet>,
    start: Option<Time>,
    end: Time,
    by: By,
) -> Timeline {
    let mut replay = Replay::default();
    for e in events.iter().take_while(|e| e.ts <= end) {
        replay.event(e, end);
    }
    replay.close(fleet, end);
    let start = start.unwrap_or_else(|| replay.fit(end));
    let Replay {
        rows,
        freezes,
        order,
        ..
    } = replay;
    let (mut out, agent_time) = clip(rows, &freezes, start, end);
    if by == By::Agent {
        out = per_agent(out);
    }
    // The busiest rows, then by name.
    out.sort_by(|a, b| {
        (b.held_secs + b.waited_secs, b.contention)
            .cmp(&(a.held_secs + a.waited_secs, a.contention))
            .then_with(|| a.key.cmp(&b.key))
    });
    out.truncate(MAX_ROWS);
    out.sort_by(|a, b| a.key.cmp(&b.key));
    let colours = super::palette::Colours::new(fleet, order.iter().map(String::as_str));
    let agents = order
        .iter()
        .map(|id| AgentColour {
            id: id.clone(),
            colour: colours.hex(id),
        })
        .collect();
    let mut agent_time: Vec<AgentTime> = agent_time
        .into_iter()
        .map(|(id, (h, w))| AgentTime {
            id,
            held_secs: h,
            waited_secs: w,
        })
        .collect();
    // The most time first (held and waited), then by id.
    agent_time.sort_by(|a, b| {
        (b.held_secs + b.waited_secs)
            .cmp(&(a.held_secs + a.waited_secs))
            .then_with(|| a.id.cmp(&b.id))
    });
    Timeline {
        start,
        end,
        by,
        rows: out,
        agents,
        agent_time,
        colours,
    }
}

/// The audit log replayed: the rows so far, what is open, the freezes, and the agents in
/// the order they first appear.
#[derive(Default)]
struct Replay {
    rows: BTreeMap<String, KeyRow>,
    /// Open holds by (key, token).
    holding: HashMap<(String, Option<u64>), (String, Time)>,
    /// Open waits by (key, agent).
    waiting: HashMap<(String, String), Time>,
    freezes: Vec<(String, Time, Time)>,
    order: Vec<String>,
    /// A fleet of thousands of agents: a set, not a scan of the list, for each hold.
    seen: std::collections::HashSet<String>,
}

impl Replay {
    /// The start of a fitted window ending at `end`: a little before the first hold,
    /// wait, mark or freeze that reaches into the last `FIT_MAX` seconds, and at least
    /// `FIT_MIN` seconds before the end (`FIT_EMPTY` when there is nothing to show).
    fn fit(&self, end: Time) -> Time {
        let limit = end - chrono::Duration::seconds(FIT_MAX);
        let spans = self
            .rows
            .values()
            .flat_map(|r| r.holds.iter().chain(&r.waits))
            .filter(|s| s.to >= limit)
            .map(|s| s.from);
        let marks = self.rows.values().flat_map(|r| &r.marks).map(|m| m.at);
        let freezes = self.freezes.iter().filter(|f| f.2 >= limit).map(|f| f.1);
        let first = spans
            .chain(freezes)
            .map(|t| t.max(limit))
            .chain(marks.filter(|t| *t >= limit))
            .filter(|t| *t <= end)
            .min();
        let Some(first) = first else {
            return end - chrono::Duration::seconds(FIT_EMPTY);
        };
        // A twentieth of the span before the first thing, so it does not touch the edge.
        let span = (end - first).num_seconds().max(FIT_MIN);
        (end - chrono::Duration::seconds(span + span / 20)).max(limit)
    }

    fn seen_agent(&mut self, a: &str) {
        if !a.is_empty() && self.seen.insert(a.to_string()) {
            self.order.push(a.to_string());
        }
    }

    fn mark(&mut self, e: &AuditEvent, kind: &'static str) {
        row(&mut self.rows, &e.key).marks.push(Mark {
            at: e.ts,
            kind,
            agent: e.agent.clone(),
        });
    }

    /// The wait of `agent` for the event's key ends with the event, if it was waiting.
    fn end_wait(&mut self, e: &AuditEvent, agent: &str) {
        if let Some(since) = self.waiting.remove(&(e.key.clone(), agent.to_string())) {
            row(&mut self.rows, &e.key).waits.push(ended_wait(e, since));
        }
    }

    fn event(&mut self, e: &AuditEvent, end: Time) {
        let key = e.key.as_str();
        let Some(kind) = e.kind() else { return };
        match kind {
            Event::Acquire => {
                self.seen_agent(&e.agent);
                self.holding
                    .insert((key.into(), e.token), (e.agent.clone(), e.ts));
                self.end_wait(e, &e.agent);
            }
            Event::Release | Event::AutoRelease | Event::ForceRelease => self.hold_ended(e),
            Event::Give => self.given(e),
            Event::Queue => {
                self.seen_agent(&e.agent);
                self.waiting
                    .entry((key.into(), e.agent.clone()))
                    .or_insert(e.ts);
                row(&mut self.rows, key).contention += 1;
            }
            Event::Deny => row(&mut self.rows, key).contention += 1,
            Event::Dequeue => self.end_wait(e, &e.agent),
            Event::Deadlock => {
                self.end_wait(e, &e.agent);
                self.mark(e, "deadlock");
            }
            Event::Notify if e.detail.as_deref() == Some("reserved") => self.mark(e, "handoff"),
            Event::Freeze => {
                let until = e
                    .detail
                    .as_deref()
                    .and_then(|d| d.strip_prefix("until "))
                    .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
                    .map(|t| t.with_timezone(&chrono::Utc))
                    .unwrap_or(end);
                self.freezes.push((e.key.clone(), e.ts, until));
            }
            Event::Unfreeze => {
                for f in self
                    .freezes
                    .iter_mut()
                    .filter(|f| f.0 == e.key && f.2 > e.ts)
                {
                    f.2 = e.ts;
                }
            }
            _ => {}
        }
    }

    /// The open hold of `agent` on the event's key, taken out: its token and holder.
    fn take_hold_of(&mut self, key: &str, agent: &str) -> Option<(Option<u64>, (String, Time))> {
        let k = self
            .holding
            .iter()
            .find(|((k, _), (a, _))| k == key && a == agent)
            .map(|(k, _)| k.clone())?;
        self.holding.remove(&k).map(|held| (k.1, held))
    }

    fn hold_ended(&mut self, e: &AuditEvent) {
        let found = self
            .holding
            .remove(&(e.key.clone(), e.token))
            .or_else(|| self.take_hold_of(&e.key, &e.agent).map(|(_, held)| held));
        if let Some((agent, from)) = found {
            row(&mut self.rows, &e.key).holds.push(Span {
                agent,
                on: None,
                token: e.token,
                from,
                to: e.ts,
                open: false,
                ended_by: Some(e.event.clone()),
            });
        }
        if e.is(Event::ForceRelease) {
            self.mark(e, "force_release");
        } else if e.is(Event::AutoRelease) && e.reason.as_deref() == Some("agent_death") {
            self.mark(e, "death");
        }
    }

    /// The giver's hold ends and the receiver's begins, under the new token.
    fn given(&mut self, e: &AuditEvent) {
        if let Some((token, (agent, from))) = self.take_hold_of(&e.key, &e.agent) {
            row(&mut self.rows, &e.key).holds.push(Span {
                agent,
                on: None,
                token,
                from,
                to: e.ts,
                open: false,
                ended_by: Some("give".into()),
            });
        }
        if let Some(to) = &e.holder {
            self.seen_agent(to);
            self.holding
                .insert((e.key.clone(), e.token), (to.clone(), e.ts));
            self.end_wait(e, to);
        }
    }

    /// What is still held or waited for runs to the end; checkouts older than the log
    /// (or than the events kept) come from the fleet.
    fn close(&mut self, fleet: Option<&Fleet>, end: Time) {
        let open = |agent: String, token: Option<u64>, from: Time| Span {
            agent,
            on: None,
            token,
            from,
            to: end,
            open: true,
            ended_by: None,
        };
        for ((key, token), (agent, from)) in std::mem::take(&mut self.holding) {
            row(&mut self.rows, &key)
                .holds
                .push(open(agent, token, from));
        }
        for c in fleet.map(|f| &f.checkouts[..]).unwrap_or_default() {
            let r = row(&mut self.rows, &c.view.key);
            let known = r
                .holds
                .iter()
                .any(|h| h.open && h.token == Some(c.view.token));
            if !known {
                r.holds.push(open(
                    c.view.agent.id.clone(),
                    Some(c.view.token),
                    c.view.acquired_at,
                ));
                self.seen_agent(&c.view.agent.id);
            }
        }
        for ((key, agent), from) in std::mem::take(&mut self.waiting) {
            row(&mut self.rows, &key)
                .waits
                .push(open(agent, None, from));
        }
    }
}

/// The rows cut to the window (what lies wholly before it dropped), with their freezes
/// and sums, and the time each agent held and waited.
type AgentSums = BTreeMap<String, (i64, i64)>;

fn clip(
    rows: BTreeMap<String, KeyRow>,
    freezes: &[(String, Time, Time)],
    start: Time,
    end: Time,
) -> (Vec<KeyRow>, AgentSums) {
    let mut agent_time = AgentSums::new();
    let mut out: Vec<KeyRow> = Vec::new();
    for (_, mut r) in rows {
        let cut = |spans: &mut Vec<Span>| {
            spans.retain(|s| s.to >= start);
            for s in spans.iter_mut() {
                s.from = s.from.max(start);
            }
            spans.sort_by_key(|s| s.from);
        };
        cut(&mut r.holds);
        cut(&mut r.waits);
        r.marks.retain(|m| m.at >= start);
        r.frozen = freezes
            .iter()
            .filter(|(p, _, until)| crate::store::freeze::covers(p, &r.key) && *until >= start)
            .map(|(_, from, until)| ((*from).max(start), (*until).min(end)))
            .collect();
        r.held_secs = r.holds.iter().map(|s| secs(s.from, s.to)).sum();
        r.waited_secs = r.waits.iter().map(|s| secs(s.from, s.to)).sum();
        for s in &r.holds {
            agent_time.entry(s.agent.clone()).or_default().0 += secs(s.from, s.to);
        }
        for s in &r.waits {
            agent_time.entry(s.agent.clone()).or_default().1 += secs(s.from, s.to);
        }
        if !(r.holds.is_empty() && r.waits.is_empty() && r.marks.is_empty()) {
            out.push(r);
        }
    }
    (out, agent_time)
}

/// The same spans, one row per agent: what it held and what it waited for.
fn per_agent(rows: Vec<KeyRow>) -> Vec<KeyRow> {
    let mut agents: BTreeMap<String, KeyRow> = BTreeMap::new();
    for r in rows {
        for mut h in r.holds {
            h.on = Some(r.key.clone());
            let a = row(&mut agents, &h.agent);
            a.held_secs += secs(h.from, h.to);
            a.holds.push(h);
        }
        for mut w in r.waits {
            w.on = Some(r.key.clone());
            let a = row(&mut agents, &w.agent);
            a.waited_secs += secs(w.from, w.to);
            a.contention += 1;
            a.waits.push(w);
        }
        for m in r.marks.into_iter().filter(|m| !m.agent.is_empty()) {
            row(&mut agents, &m.agent).marks.push(m);
        }
    }
    agents
        .into_values()
        .map(|mut r| {
            r.holds.sort_by_key(|s| s.from);
            r.waits.sort_by_key(|s| s.from);
            r
        })
        .collect()
}

/// A wait that began at `since` and ended with the event `e` (the grant, or a way out of
/// the queue).
fn ended_wait(e: &AuditEvent, since: Time) -> Span {
    Span {
        agent: e.agent.clone(),
        on: None,
        token: None,
        from: since,
        to: e.ts,
        open: false,
        ended_by: Some(e.event.clone()),
    }
}

fn row<'a>(rows: &'a mut BTreeMap<String, KeyRow>, key: &str) -> &'a mut KeyRow {
    rows.entry(key.to_string()).or_insert_with(|| KeyRow {
        key: key.to_string(),
        holds: Vec::new(),
        waits: Vec::new(),
        marks: Vec::new(),
        frozen: Vec::new(),
        held_secs: 0,
        waited_secs: 0,
        contention: 0,
    })
}

/// Text for XML, attributes included.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            // Not allowed in XML 1.0 at all (a store of older versions may hold them):
            // shown, not dropped.
            c if ((c as u32) < 0x20 && c != '\t') || matches!(c, '\u{fffe}' | '\u{ffff}') => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            // Bidirectional overrides would reorder what follows them.
            '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200e}' | '\u{200f}' => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

fn short(secs: i64) -> String {
    match secs {
        s if s < 100 => format!("{s}s"),
        s if s < 6000 => format!("{}m", s / 60),
        s => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
    }
}

/// Steps between the axis' labels, in seconds: the first that gives at most eight.
const STEPS: [i64; 21] = [
    1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10_800, 21_600, 43_200, 86_400,
    172_800, 345_600, 604_800,
];

/// The time axis: labels at round times (every 5 minutes, every hour, …) with their grid
/// lines (none through an empty plot), and "now" at the end, its label kept inside the
/// picture (anchored at its end) and no label crowding it.
fn axis(s: &mut String, t: &Timeline, x: &dyn Fn(Time) -> f64, bottom: f64) {
    const TOP: f64 = 40.0;
    let span = (t.end - t.start).num_seconds().max(1);
    let step = STEPS
        .iter()
        .copied()
        .find(|st| span / st <= 8)
        .unwrap_or(604_800);
    let format = match step {
        st if st < 60 => "%H:%M:%S",
        st if st < 86_400 => "%H:%M",
        _ => "%m-%d %H:%M",
    };
    let grid = !t.rows.is_empty();
    let now = x(t.end);
    let mut at = (t.start.timestamp() / step + 1) * step;
    while at < t.end.timestamp() {
        let when = chrono::DateTime::from_timestamp(at, 0).unwrap_or(t.start);
        let xx = x(when);
        at += step;
        if now - xx < 125.0 {
            continue;
        }
        if grid {
            let _ = write!(
                s,
                r##"<line x1="{xx:.1}" y1="{TOP}" x2="{xx:.1}" y2="{bottom:.1}" stroke="#ddd"/>"##
            );
        }
        let _ = write!(
            s,
            r##"<text class="tick" x="{xx:.1}" y="{:.1}" text-anchor="middle" fill="#666">{}</text>"##,
            TOP - 6.0,
            when.format(format)
        );
    }
    let _ = write!(
        s,
        r##"<line class="now" x1="{now:.1}" y1="{:.1}" x2="{now:.1}" y2="{bottom:.1}" stroke="#d33" stroke-width="1.5"/><text class="now" x="{now:.1}" y="{:.1}" text-anchor="end" fill="#d33" font-weight="bold">now {}</text>"##,
        TOP,
        TOP - 6.0,
        t.end.format("%H:%M:%S")
    );
}

/// The timeline as an SVG document.
/// The timeline as one HTML file that needs nothing else (no script, no link, no
/// network): a title, the picture, and where the time went per key and per agent, the
/// most first. `store` names the fleet.
pub fn html(t: &Timeline, store: &str) -> String {
    let when = |x: Time| x.format("%Y-%m-%d %H:%M:%S UTC").to_string();
    let dur = |s: i64| match s {
        s if s < 100 => format!("{s}s"),
        s if s < 6000 => format!("{}m", s / 60),
        s => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
    };
    let mut out = String::with_capacity(16 * 1024);
    let _ = write!(
        out,
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>tasklock timeline · {store}</title>\n<style>body{{font:14px/1.45 system-ui,sans-serif;margin:24px;color:#1f2328;background:#fff}}h1{{font-size:20px;margin:0 0 4px}}p{{color:#59636e;margin:0 0 16px}}svg{{max-width:100%;height:auto;border:1px solid #d1d9e0;border-radius:6px}}table{{border-collapse:collapse;margin:12px 24px 12px 0;display:inline-table;vertical-align:top}}th,td{{padding:3px 10px;border-bottom:1px solid #d1d9e0;text-align:left}}td.n{{text-align:right;font-variant-numeric:tabular-nums}}.k{{font-family:ui-monospace,monospace;white-space:nowrap}}i{{display:inline-block;width:.8em;height:.8em;border-radius:2px;margin-right:.4em}}</style></head><body>\n<h1>tasklock timeline</h1>\n<p>{store} · {} to {}</p>\n",
        when(t.start),
        when(t.end),
        store = escape(store),
    );
    out.push_str(&svg(t));
    let mut rows: Vec<&KeyRow> = t.rows.iter().collect();
    rows.sort_by_key(|r| std::cmp::Reverse(r.held_secs + r.waited_secs));
    let first = if t.by == By::Agent { "Agent" } else { "Key" };
    let _ = write!(
        out,
        "<h2>Where the time went</h2>\n<table><tr><th>{first}</th><th>Held</th><th>Waited</th><th>Contention</th></tr>"
    );
    for r in rows {
        let _ = write!(
            out,
            "<tr><td class=\"k\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
            escape(&r.key),
            dur(r.held_secs),
            dur(r.waited_secs),
            r.contention
        );
    }
    out.push_str("</table>\n<table><tr><th>Agent</th><th>Held</th><th>Waited</th></tr>");
    let mut agents: Vec<&AgentTime> = t.agent_time.iter().collect();
    agents.sort_by_key(|a| std::cmp::Reverse(a.held_secs + a.waited_secs));
    for a in agents {
        let _ = write!(
            out,
            "<tr><td class=\"k\"><i style=\"background:{}\"></i>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
            t.colour(&a.id),
            escape(&a.id),
            dur(a.held_secs),
            dur(a.waited_secs)
        );
    }
    out.push_str("</table>\n</body></html>\n");
    out
}

pub fn svg(t: &Timeline) -> String {
    const W: f64 = 1200.0;
    const LABEL: f64 = 240.0;
    const ROW: f64 = 24.0;
    const TOP: f64 = 40.0;
    let width = W - LABEL - 20.0;
    let span = (t.end - t.start).num_milliseconds().max(1) as f64;
    let x = |at: Time| LABEL + (at - t.start).num_milliseconds().max(0) as f64 / span * width;
    let legend_rows = t.agents.len().div_ceil(6).max(1);
    let height = TOP + ROW * t.rows.len().max(1) as f64 + 30.0 + 20.0 * legend_rows as f64 + 10.0;
    let mut s = String::new();
    let _ = write!(
        s,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{height}" viewBox="0 0 {W} {height}" font-family="system-ui, sans-serif" font-size="12">"##
    );
    let _ = write!(
        s,
        r##"<rect width="100%" height="100%" fill="#fff"/><text x="10" y="20" font-size="14" font-weight="bold">tasklock: {} to {} UTC{}</text>"##,
        t.start.format("%Y-%m-%d %H:%M:%S"),
        t.end.format("%H:%M:%S"),
        if t.by == By::Agent { ", by agent" } else { "" }
    );
    axis(&mut s, t, &x, TOP + ROW * t.rows.len().max(1) as f64);
    if t.rows.is_empty() {
        // In the middle of the plot, where no grid line is drawn.
        let _ = write!(
            s,
            r##"<text class="empty" x="{:.1}" y="{:.1}" text-anchor="middle" fill="#666">Nothing held or waited for in this window.</text>"##,
            LABEL + width / 2.0,
            TOP + 16.0
        );
    }
    for (i, r) in t.rows.iter().enumerate() {
        let y = TOP + ROW * i as f64;
        let label: String = r.key.chars().take(34).collect();
        let _ = write!(
            s,
            r##"<g><title>{} · held {} · waited {} · {} {}</title><text x="10" y="{:.1}">{}{}</text></g>"##,
            escape(&r.key),
            short(r.held_secs),
            short(r.waited_secs),
            r.contention,
            if t.by == By::Agent {
                "waits"
            } else {
                "queue joins and refusals"
            },
            y + 16.0,
            escape(&label),
            if r.key.chars().count() > 34 {
                "…"
            } else {
                ""
            }
        );
        for (from, to) in &r.frozen {
            let _ = write!(
                s,
                r##"<rect class="freeze" x="{:.1}" y="{y:.1}" width="{:.1}" height="{ROW}" fill="#9cf" fill-opacity="0.25"><title>frozen</title></rect>"##,
                x(*from),
                (x(*to) - x(*from)).max(1.0)
            );
        }
        for h in &r.holds {
            let _ = write!(
                s,
                r##"<rect class="hold" x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}" rx="2" fill="{}" fill-opacity="0.8"><title>{}{}{} for {}{}</title></rect>"##,
                x(h.from),
                y + 3.0,
                (x(h.to) - x(h.from)).max(1.5),
                ROW - 10.0,
                t.colour(&h.agent),
                escape(&h.agent),
                match &h.on {
                    Some(k) => format!(" held {}", escape(k)),
                    None => " held it".into(),
                },
                h.token.map(|t| format!(" (token {t})")).unwrap_or_default(),
                short(secs(h.from, h.to)),
                match (&h.ended_by, h.open) {
                    (_, true) => ", still held".to_string(),
                    (Some(e), _) => format!(", ended by {}", escape(e)),
                    _ => String::new(),
                }
            );
        }
        for w in &r.waits {
            let _ = write!(
                s,
                r##"<rect class="wait" x="{:.1}" y="{:.1}" width="{:.1}" height="4" fill="{}" fill-opacity="0.6"><title>{} waited{} {}</title></rect>"##,
                x(w.from),
                y + ROW - 6.0,
                (x(w.to) - x(w.from)).max(1.5),
                t.colour(&w.agent),
                escape(&w.agent),
                w.on.as_ref()
                    .map(|k| format!(" for {}", escape(k)))
                    .unwrap_or_default(),
                short(secs(w.from, w.to))
            );
        }
        for m in &r.marks {
            let (glyph, fill, what) = match m.kind {
                "death" => ("✕", "#c00", "died"),
                "force_release" => ("▼", "#e80", "was force-released"),
                "deadlock" => ("⟳", "#c00", "was told of a deadlock"),
                _ => ("•", "#333", "was handed the key"),
            };
            let _ = write!(
                s,
                r##"<text class="mark {}" x="{:.1}" y="{:.1}" text-anchor="middle" fill="{fill}" font-weight="bold">{glyph}<title>{} {what} at {}</title></text>"##,
                m.kind,
                x(m.at),
                y + 16.0,
                escape(&m.agent),
                m.at.format("%H:%M:%S")
            );
        }
    }
    // The agents' colours, six to a line.
    let ly = TOP + ROW * t.rows.len().max(1) as f64 + 30.0;
    for (i, a) in t.agents.iter().enumerate() {
        let lx = 10.0 + (i % 6) as f64 * 195.0;
        let yy = ly + (i / 6) as f64 * 20.0;
        let name: String = a.id.chars().take(26).collect();
        let _ = write!(
            s,
            r##"<rect x="{lx:.1}" y="{:.1}" width="12" height="12" fill="{}"/><text x="{:.1}" y="{yy:.1}">{}</text>"##,
            yy - 10.0,
            a.colour,
            lx + 16.0,
            escape(&name)
        );
    }
    s.push_str("</svg>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(ts: i64, event: &str, key: &str, agent: &str, token: Option<u64>) -> AuditEvent {
        let mut e = AuditEvent::new(
            chrono::DateTime::from_timestamp(ts, 0).unwrap(),
            Event::parse(event).expect("a known event"),
            key,
            agent,
        );
        e.token = token;
        e
    }

    #[test]
    fn holds_waits_and_deaths_from_the_log() {
        let t0 = chrono::DateTime::from_timestamp(0, 0).unwrap();
        let events = vec![
            ev(10, "acquire", "k", "a", Some(1)),
            ev(20, "queue", "k", "b", None),
            {
                let mut e = ev(40, "auto_release", "k", "a", Some(1));
                e.reason = Some("agent_death".into());
                e
            },
            ev(41, "acquire", "k", "b", Some(2)),
        ];
        let t = build(&events, None, t0, t0 + chrono::Duration::seconds(100));
        assert_eq!(t.rows.len(), 1);
        let r = &t.rows[0];
        assert_eq!(r.holds.len(), 2);
        assert_eq!((r.holds[0].agent.as_str(), r.held_secs), ("a", 30 + 59));
        assert!(r.holds[1].open);
        assert_eq!(r.waits.len(), 1);
        assert_eq!(r.waited_secs, 21);
        assert_eq!(r.marks[0].kind, "death");
        assert_eq!(r.contention, 1);
    }

    #[test]
    fn a_give_ends_the_givers_hold_and_starts_the_receivers() {
        let t0 = chrono::DateTime::from_timestamp(0, 0).unwrap();
        let mut give = ev(30, "give", "k", "a", Some(2));
        give.holder = Some("b".into());
        let events = vec![
            ev(10, "acquire", "k", "a", Some(1)),
            give,
            ev(50, "release", "k", "b", Some(2)),
        ];
        let t = build(&events, None, t0, t0 + chrono::Duration::seconds(100));
        let r = &t.rows[0];
        assert_eq!(r.holds.len(), 2, "{:?}", r.holds.len());
        assert_eq!(r.holds[0].agent, "a");
        assert_eq!(r.holds[0].ended_by.as_deref(), Some("give"));
        assert_eq!((r.holds[1].agent.as_str(), r.holds[1].open), ("b", false));
        assert_eq!(r.held_secs, 40);
    }

    #[test]
    fn a_fitted_window_starts_a_little_before_the_first_thing_and_at_most_a_day_back() {
        let at = |s: i64| chrono::DateTime::from_timestamp(s, 0).unwrap();
        let end = at(1_000_000);
        let fit = |events: &[AuditEvent]| build_window(events, None, Window::Fit, end, By::Key);
        // Two minutes of work: two minutes and a twentieth.
        let t = fit(&[ev(1_000_000 - 120, "acquire", "k", "a", Some(1))]);
        assert_eq!((t.start, t.end), (at(1_000_000 - 126), end));
        // A moment ago: a minute at least.
        let t = fit(&[ev(1_000_000 - 5, "acquire", "k", "a", Some(1))]);
        assert_eq!(t.start, at(1_000_000 - 63));
        // Held for two days: a day back, no more.
        let t = fit(&[ev(1_000_000 - 2 * 86_400, "acquire", "k", "a", Some(1))]);
        assert_eq!(t.start, at(1_000_000 - FIT_MAX));
        assert_eq!(t.rows[0].held_secs, FIT_MAX);
        // What ended before that day is not in view; nothing at all: fifteen minutes.
        let old = [
            ev(1_000_000 - 3 * 86_400, "acquire", "k", "a", Some(1)),
            ev(1_000_000 - 2 * 86_400, "release", "k", "a", Some(1)),
        ];
        assert_eq!(fit(&old).start, at(1_000_000 - FIT_EMPTY));
        assert!(fit(&old).rows.is_empty());
        assert_eq!(fit(&[]).start, at(1_000_000 - FIT_EMPTY));
    }

    #[test]
    fn text_in_the_picture_is_escaped() {
        assert_eq!(escape("<script>&\"'"), "&lt;script&gt;&amp;&quot;&#39;");
        assert_eq!(escape("a\u{202e}b\u{1b}"), "a\\u{202e}b\\u{1b}");
        assert_eq!(escape("k\u{fffe}\u{ffff}"), "k\\u{fffe}\\u{ffff}");
    }
}
