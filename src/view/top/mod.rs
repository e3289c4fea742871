//! `tasklock top`: the fleet, live, in the terminal.
//!
//! Threads: the store's watcher reads a snapshot (`engine::fleet`) and the new audit
//! events each time the store says something changed (inotify or kqueue on the lock
//! directory, `LISTEN` on PostgreSQL), and at least once a second for leases and
//! heartbeats; a worker reads a key's notes and runs the actions a person asks for; a
//! reader turns keystrokes into messages. The drawing thread owns the screen and does no
//! I/O but the drawing. Looking takes no lock and writes nothing.

mod detail;
mod draw;
mod parts;
mod tables;

use std::collections::{HashSet, VecDeque};
use std::io::IsTerminal;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::time::Duration;

use ratatui::crossterm::event::{self, Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

use super::{EVENTS_KEPT, REFRESH, context, recent_events, store_of};
use crate::cli::Global;
use crate::clock;
use crate::engine::Ctx;
use crate::engine::fleet::{self, Fleet, FleetAgent, FleetCheckout};
use crate::error::{Error, Result};
use crate::liveness::State;
use crate::store::AuditEvent;

#[derive(clap::Parser, Debug)]
#[command(
    name = "tasklock top",
    about = "The fleet, live: checkouts, agents, waits, freezes and events"
)]
pub struct Args {
    #[command(flatten)]
    pub global: Global,
    /// Look only: no force-release or freeze from the view
    #[arg(long)]
    pub read_only: bool,
    /// Print one frame (or, with --json, the fleet as JSON) and exit
    #[arg(long)]
    pub once: bool,
    /// The frame's size for --once, as COLUMNSxROWS
    #[arg(long, value_name = "COLSxROWS", default_value = "120x40", value_parser = size)]
    pub size: (u16, u16),
    /// Tell the desktop of deaths, deadlocks, handoffs, lapses, leases run out,
    /// force-releases and freezes as they happen (notify-send, osascript, or the
    /// terminal's notification)
    #[arg(long, conflicts_with = "once")]
    pub notify: bool,
}

fn size(s: &str) -> std::result::Result<(u16, u16), String> {
    let (c, r) = s
        .split_once('x')
        .ok_or_else(|| format!("{s:?} is not COLUMNSxROWS (like 120x40)"))?;
    let parse = |v: &str| {
        v.parse::<u16>()
            .ok()
            .filter(|n| (10..=1000).contains(n))
            .ok_or_else(|| format!("{v:?} in {s:?} is not a size from 10 to 1000"))
    };
    Ok((parse(c)?, parse(r)?))
}

/// `tasklock top [--read-only] [--once [--json] [--size CxR]]`.
pub fn main(args: Vec<std::ffi::OsString>) -> i32 {
    super::run(args, "top", |a: Args| {
        let json = a.global.json || a.global.format == Some(crate::cli::FormatArg::Json);
        view(&a, json)
    })
}

fn view(a: &Args, json: bool) -> Result<()> {
    if a.once {
        once(a, json)
    } else if json {
        Err(Error::Usage(
            "--json needs --once: the live view is for a terminal; `tasklock top --once --json` prints the fleet once".into(),
        ))
    } else if !std::io::stdout().is_terminal() {
        Err(Error::Usage(
            "tasklock top draws on a terminal, and stdout is not one; `tasklock top --once` prints one frame, `--once --json` the fleet as JSON".into(),
        ))
    } else {
        live(a)
    }
}

fn once(a: &Args, json: bool) -> Result<()> {
    let ctx = context(&a.global)?;
    let store = store_of(&ctx)?;
    let fleet = fleet::snapshot(&ctx, &*store)?;
    if json {
        let text = serde_json::to_string_pretty(&fleet)
            .map_err(|e| Error::Store(format!("cannot write the fleet as JSON: {e}")))?;
        println!("{text}");
        return Ok(());
    }
    let mut app = App::new(a, &ctx);
    app.events = recent_events(&*store)?;
    app.colours = crate::view::palette::Colours::new(Some(&fleet), []);
    app.fleet = Some(fleet);
    let (cols, rows) = a.size;
    let backend = ratatui::backend::TestBackend::new(cols, rows);
    let mut term =
        ratatui::Terminal::new(backend).map_err(|e| Error::Store(format!("cannot draw: {e}")))?;
    let now = ctx.now();
    let started = std::time::Instant::now();
    term.draw(|f| draw::draw(f, &app, now))
        .map_err(|e| Error::Store(format!("cannot draw: {e}")))?;
    // For bench/top.py: the frame alone, apart from reading the store.
    if std::env::var_os("TASKLOCK_BENCH_DRAW").is_some() {
        eprintln!(
            "drawn in {:.2} ms",
            started.elapsed().as_secs_f64() * 1000.0
        );
    }
    let buf = term.backend().buffer();
    let mut out = String::new();
    for y in 0..buf.area.height {
        let mut line = String::new();
        for x in 0..buf.area.width {
            line.push_str(buf[(x, y)].symbol());
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    print!("{out}");
    Ok(())
}

/// The view's sections, in the order of their tabs (keys `1` to `4`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pane {
    Checkouts,
    Agents,
    Waits,
    Events,
}

impl Pane {
    const ALL: [Pane; 4] = [Pane::Checkouts, Pane::Agents, Pane::Waits, Pane::Events];

    fn index(self) -> usize {
        Pane::ALL.iter().position(|p| *p == self).unwrap_or(0)
    }

    fn word(self) -> &'static str {
        match self {
            Pane::Checkouts => "Checkouts",
            Pane::Agents => "Agents",
            Pane::Waits => "Waits & freezes",
            Pane::Events => "Events",
        }
    }
}

/// The checkouts' order: `s` picks the next column, `S` reverses it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sort {
    /// What needs a person first: dead holders, deadlocks, stalled holders, waits.
    Attention,
    Key,
    LeaseLeft,
    Held,
}

impl Sort {
    fn word(self) -> &'static str {
        match self {
            Sort::Attention => "attention",
            Sort::Key => "key",
            Sort::LeaseLeft => "lease left",
            Sort::Held => "time held",
        }
    }

    fn next(self) -> Sort {
        match self {
            Sort::Attention => Sort::Key,
            Sort::Key => Sort::LeaseLeft,
            Sort::LeaseLeft => Sort::Held,
            Sort::Held => Sort::Attention,
        }
    }
}

/// An agent's or a checkout's need of a person: lower first.
fn attention_rank(state: State, ending: bool, deadlocked: bool, waits: bool) -> u8 {
    match (state, ending, deadlocked, waits) {
        (State::Dead, ..) | (_, true, ..) => 0,
        (_, _, true, _) => 1,
        (State::Stalled, ..) => 2,
        (_, _, _, true) => 3,
        _ => 4,
    }
}

/// One line of the Waits & freezes pane, and the key it is about.
pub enum WaitItem<'a> {
    Cycle(&'a [String]),
    Wait {
        wait: &'a fleet::Wait,
        in_cycle: bool,
    },
    Reserved {
        key: &'a str,
        reservation: &'a crate::store::Reservation,
    },
    Frozen(&'a crate::store::Freeze),
}

impl WaitItem<'_> {
    fn key(&self) -> Option<String> {
        match self {
            WaitItem::Cycle(_) => None,
            WaitItem::Wait { wait, .. } => Some(wait.key.clone()),
            WaitItem::Reserved { key, .. } => Some(key.to_string()),
            // A pattern is not a key: its detail would be of a key nobody holds.
            WaitItem::Frozen(_) => None,
        }
    }
}

enum Mode {
    Normal,
    Filter,
    FreezeFor { key: String, input: String },
    Confirm { prompt: String, job: Job },
}

enum Detail {
    Key {
        key: String,
        notes: Option<std::result::Result<Vec<String>, String>>,
        /// What `tasklock why KEY` says of it, line by line.
        why: Vec<String>,
    },
    Agent {
        id: String,
    },
}

/// What the drawing thread asks of the worker.
#[derive(Clone)]
enum Job {
    Notes(String),
    /// A command of tasklock's on one key (after `--`: never read as an option), run
    /// under the commands' own rules.
    Run {
        command: &'static str,
        options: Vec<String>,
        key: String,
    },
}

enum Msg {
    Fleet(Box<Fleet>, Vec<AuditEvent>),
    StoreError(String),
    Notes(
        String,
        std::result::Result<Vec<String>, String>,
        Vec<String>,
    ),
    Done(String),
    Input(Event),
}

pub struct App {
    fleet: Option<Fleet>,
    /// Each agent's colour, given out over the fleet as the page gives it.
    colours: crate::view::palette::Colours,
    events: VecDeque<AuditEvent>,
    focus: Pane,
    selected: [usize; 4],
    filter: String,
    sort: Sort,
    /// The sort's order reversed (`S`).
    reversed: bool,
    /// The help overlay (`?`) is open.
    help: bool,
    mode: Mode,
    detail: Option<Detail>,
    message: Option<String>,
    error: Option<String>,
    color: bool,
    /// Whether this view may force-release and freeze, or why not.
    can_act: std::result::Result<(), String>,
    /// `--notify`: where new events worth telling go.
    desktop: Option<crate::view::desktop::Desktop>,
    quit: bool,
}

impl App {
    fn new(a: &Args, ctx: &Ctx) -> App {
        let color = std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
        App {
            fleet: None,
            colours: Default::default(),
            events: VecDeque::new(),
            focus: Pane::Checkouts,
            selected: [0; 4],
            filter: String::new(),
            sort: Sort::Attention,
            reversed: false,
            help: false,
            mode: Mode::Normal,
            detail: None,
            message: None,
            error: None,
            color,
            can_act: super::may_act(a.read_only, &a.global, ctx),
            desktop: a.notify.then(crate::view::desktop::Desktop::detect),
            quit: false,
        }
    }

    fn matches(&self, fields: &[&str]) -> bool {
        if self.filter.is_empty() {
            return true;
        }
        let f = self.filter.to_lowercase();
        fields.iter().any(|s| s.to_lowercase().contains(&f))
    }

    fn visible_checkouts(&self) -> Vec<&FleetCheckout> {
        let Some(fl) = &self.fleet else {
            return Vec::new();
        };
        let mut v: Vec<&FleetCheckout> = fl
            .checkouts
            .iter()
            .filter(|c| {
                self.matches(&[
                    &c.view.key,
                    &c.view.agent.id,
                    c.view.agent.name.as_deref().unwrap_or(""),
                ])
            })
            .collect();
        // Stable sorts over the fleet's order (by key): ties stay by key.
        match self.sort {
            Sort::Attention => {
                // Who waits and who is in a cycle, found once: looked up for each
                // comparison, 10,000 checkouts by 1,000 agents took 60% of a frame.
                let waiting: HashSet<&str> = fl
                    .agents
                    .iter()
                    .filter(|a| !a.waiting_for().is_empty())
                    .map(|a| a.row.id.as_str())
                    .collect();
                let cycles: HashSet<&str> =
                    fl.cycles.iter().flatten().map(String::as_str).collect();
                v.sort_by_key(|c| {
                    let id = c.view.agent.id.as_str();
                    attention_rank(
                        c.holder_state,
                        c.ending.is_some(),
                        cycles.contains(id),
                        waiting.contains(id) || c.queued > 0,
                    )
                });
            }
            Sort::Key => {}
            Sort::LeaseLeft => v.sort_by_key(|c| c.view.expires_at),
            // Longest held first: the column's value, descending.
            Sort::Held => v.sort_by_key(|c| c.view.acquired_at),
        }
        if self.reversed {
            v.reverse();
        }
        v
    }

    /// Whether the checkouts' order is the sorted column's values descending (`▼`):
    /// attention and time held start with the most, a key and a lease with the least.
    fn descending(&self) -> bool {
        matches!(self.sort, Sort::Attention | Sort::Held) != self.reversed
    }

    fn deadlocked(&self, id: &str) -> bool {
        self.fleet
            .as_ref()
            .is_some_and(|fl| fl.cycles.iter().any(|c| c.iter().any(|a| a == id)))
    }

    /// An agent as the CLI names it: "alice (researcher)", or "alice".
    fn who(&self, id: &str) -> String {
        let name = self.fleet.as_ref().and_then(|fl| {
            fl.agents
                .iter()
                .find(|a| a.row.id == id)
                .and_then(|a| a.row.name.clone())
                .or_else(|| {
                    fl.checkouts
                        .iter()
                        .find(|c| c.view.agent.id == id)
                        .and_then(|c| c.view.agent.name.clone())
                })
        });
        crate::identity::label(id, name.as_deref(), None)
    }

    /// The Waits & freezes pane: deadlocks, waits, reservations, freezes.
    fn wait_items(&self) -> Vec<WaitItem<'_>> {
        let Some(fl) = &self.fleet else {
            return Vec::new();
        };
        let mut items: Vec<WaitItem> = fl.cycles.iter().map(|c| WaitItem::Cycle(c)).collect();
        for w in fl
            .waits
            .iter()
            .filter(|w| self.matches(&[&w.waiter, &w.key, &w.blocker]))
        {
            let in_cycle = fl
                .cycles
                .iter()
                .any(|c| c.contains(&w.waiter) && c.contains(&w.blocker));
            items.push(WaitItem::Wait { wait: w, in_cycle });
        }
        for (key, q) in &fl.queues {
            for r in q.reserved_for.iter().chain(&q.also_reserved) {
                if self.matches(&[key, &r.agent]) {
                    items.push(WaitItem::Reserved {
                        key,
                        reservation: r,
                    });
                }
            }
        }
        for fr in fl.freezes.iter().filter(|fr| self.matches(&[&fr.pattern])) {
            items.push(WaitItem::Frozen(fr));
        }
        items
    }

    fn visible_agents(&self) -> Vec<&FleetAgent> {
        let Some(fl) = &self.fleet else {
            return Vec::new();
        };
        let mut v: Vec<&FleetAgent> = fl
            .agents
            .iter()
            .filter(|a| {
                self.matches(&[&a.row.id, a.row.name.as_deref().unwrap_or("")])
                    || a.row.checkouts.iter().any(|k| self.matches(&[k]))
            })
            .collect();
        // What needs a person first, in the engine's order otherwise.
        v.sort_by_key(|a| {
            attention_rank(
                a.row.state,
                false,
                self.deadlocked(&a.row.id),
                !a.waiting_for().is_empty(),
            )
        });
        v
    }

    /// Newest first.
    fn visible_events(&self) -> Vec<&AuditEvent> {
        self.events
            .iter()
            .rev()
            .filter(|e| self.matches(&[&e.key, &e.agent, &e.event, e.by.as_deref().unwrap_or("")]))
            .collect()
    }

    fn pane_len(&self) -> usize {
        match self.focus {
            Pane::Checkouts => self.visible_checkouts().len(),
            Pane::Agents => self.visible_agents().len(),
            Pane::Waits => self.wait_items().len(),
            Pane::Events => self.visible_events().len(),
        }
    }

    fn selected_key(&self) -> Option<String> {
        match self.focus {
            Pane::Checkouts => self
                .visible_checkouts()
                .get(self.selected[0])
                .map(|c| c.view.key.clone()),
            Pane::Waits => self
                .wait_items()
                .get(self.selected[2])
                .and_then(WaitItem::key),
            Pane::Events => self
                .visible_events()
                .get(self.selected[3])
                .map(|e| e.key.clone())
                .filter(|k| !k.is_empty()),
            Pane::Agents => None,
        }
    }

    /// A key pressed; returns a job for the worker, if any.
    fn key(&mut self, k: KeyEvent) -> Option<Job> {
        if k.kind == KeyEventKind::Release {
            return None;
        }
        if k.modifiers.contains(KeyModifiers::CONTROL) && k.code == KeyCode::Char('c') {
            self.quit = true;
            return None;
        }
        if k.modifiers.contains(KeyModifiers::ALT) {
            return self.esc_then(k);
        }
        match std::mem::replace(&mut self.mode, Mode::Normal) {
            Mode::Filter => {
                match k.code {
                    KeyCode::Enter => {}
                    KeyCode::Esc => self.filter.clear(),
                    KeyCode::Backspace => {
                        self.filter.pop();
                        self.mode = Mode::Filter;
                    }
                    KeyCode::Char(c) => {
                        self.filter.push(c);
                        self.mode = Mode::Filter;
                    }
                    _ => self.mode = Mode::Filter,
                }
                self.selected = [0; 4];
                None
            }
            Mode::FreezeFor { key, mut input } => match k.code {
                KeyCode::Esc => None,
                KeyCode::Enter => match crate::duration::parse(input.trim()) {
                    Ok(_) => {
                        let job = Job::Run {
                            command: "freeze",
                            options: vec![
                                format!("--for={}", input.trim()),
                                "--reason=frozen from tasklock top".into(),
                            ],
                            key: key.clone(),
                        };
                        self.mode = Mode::Confirm {
                            prompt: format!("Freeze {} for {}?", parts::inert(&key), input.trim()),
                            job,
                        };
                        None
                    }
                    Err(e) => {
                        self.message = Some(format!("not a duration: {e}"));
                        None
                    }
                },
                KeyCode::Backspace => {
                    input.pop();
                    self.mode = Mode::FreezeFor { key, input };
                    None
                }
                KeyCode::Char(c) => {
                    input.push(c);
                    self.mode = Mode::FreezeFor { key, input };
                    None
                }
                _ => {
                    self.mode = Mode::FreezeFor { key, input };
                    None
                }
            },
            Mode::Confirm { job, .. } => match k.code {
                KeyCode::Char('y') | KeyCode::Char('Y') => {
                    self.message = Some("working…".into());
                    Some(job)
                }
                _ => {
                    self.message = Some("cancelled".into());
                    None
                }
            },
            Mode::Normal => self.normal_key(k),
        }
    }

    /// A key with Alt. A terminal sends Alt+c as Esc then c, so Esc followed at once by
    /// a key (typed fast, or both bytes read at once on a busy machine) arrives as Alt and
    /// that key. The view binds no Alt key: it is Esc then the key, the Esc taken where
    /// it backs out of something (a filter, a prompt, a detail) and never as a quit.
    fn esc_then(&mut self, k: KeyEvent) -> Option<Job> {
        if !matches!(self.mode, Mode::Normal) || self.detail.is_some() {
            let _ = self.key(KeyEvent::new(KeyCode::Esc, KeyModifiers::NONE));
        }
        self.key(KeyEvent {
            modifiers: k.modifiers - KeyModifiers::ALT,
            ..k
        })
    }

    fn normal_key(&mut self, k: KeyEvent) -> Option<Job> {
        self.message = None;
        if self.help {
            // Any key closes the help; `q` and Esc only close it.
            self.help = false;
            return None;
        }
        if self.detail.is_some() {
            if matches!(k.code, KeyCode::Esc | KeyCode::Enter | KeyCode::Char('q')) {
                self.detail = None;
            }
            return None;
        }
        let i = self.focus.index();
        let len = self.pane_len();
        match k.code {
            KeyCode::Char('q') | KeyCode::Esc => self.quit = true,
            KeyCode::Char('?') => self.help = true,
            KeyCode::Tab | KeyCode::Right => self.focus = Pane::ALL[(i + 1) % 4],
            KeyCode::BackTab | KeyCode::Left => self.focus = Pane::ALL[(i + 3) % 4],
            KeyCode::Char(c @ '1'..='4') => self.focus = Pane::ALL[usize::from(c as u8 - b'1')],
            KeyCode::Down | KeyCode::Char('j') => {
                self.selected[i] = (self.selected[i] + 1).min(len.saturating_sub(1))
            }
            KeyCode::Up | KeyCode::Char('k') => {
                self.selected[i] = self.selected[i].saturating_sub(1)
            }
            KeyCode::Home | KeyCode::Char('g') => self.selected[i] = 0,
            KeyCode::End | KeyCode::Char('G') => self.selected[i] = len.saturating_sub(1),
            KeyCode::Char('/') => self.mode = Mode::Filter,
            KeyCode::Char('s') => {
                self.sort = self.sort.next();
                self.reversed = false;
            }
            KeyCode::Char('S') => self.reversed = !self.reversed,
            KeyCode::Enter => {
                if self.focus == Pane::Agents {
                    if let Some(a) = self.visible_agents().get(self.selected[1]) {
                        self.detail = Some(Detail::Agent {
                            id: a.row.id.clone(),
                        });
                    }
                } else if let Some(key) = self.selected_key() {
                    self.detail = Some(Detail::Key {
                        key: key.clone(),
                        notes: None,
                        why: Vec::new(),
                    });
                    return Some(Job::Notes(key));
                }
            }
            KeyCode::Char('r') | KeyCode::Char('f') => {
                if let Err(why) = &self.can_act {
                    self.message = Some(format!("read-only: {why}"));
                    return None;
                }
                let Some(key) = self.selected_key() else {
                    self.message = Some("select a checkout first".into());
                    return None;
                };
                if k.code == KeyCode::Char('r') {
                    self.mode = Mode::Confirm {
                        prompt: format!(
                            "Force-release {}? Its holder is told, and the release is audited.",
                            parts::inert(&key)
                        ),
                        job: Job::Run {
                            command: "release",
                            options: vec![
                                "--force".into(),
                                "--note=force-released from tasklock top".into(),
                            ],
                            key,
                        },
                    };
                } else {
                    self.mode = Mode::FreezeFor {
                        key,
                        input: "30m".into(),
                    };
                }
            }
            _ => {}
        }
        None
    }

    fn take(&mut self, msg: Msg) -> Option<Job> {
        match msg {
            Msg::Fleet(f, new) => {
                self.error = None;
                self.colours = crate::view::palette::Colours::new(Some(&f), []);
                if let Some(d) = &self.desktop {
                    d.tell(&new, &f.store);
                }
                self.fleet = Some(*f);
                for e in new {
                    if self.events.len() == EVENTS_KEPT {
                        self.events.pop_front();
                    }
                    self.events.push_back(e);
                }
            }
            Msg::StoreError(e) => self.error = Some(e),
            Msg::Notes(key, notes, why) => {
                if let Some(Detail::Key {
                    key: k,
                    notes: n,
                    why: w,
                }) = &mut self.detail
                    && *k == key
                {
                    *n = Some(notes);
                    *w = why;
                }
            }
            Msg::Done(text) => self.message = Some(text),
            Msg::Input(Event::Key(k)) => return self.key(k),
            Msg::Input(_) => {}
        }
        None
    }
}

/// The store's watcher: a snapshot and the new events each time something changes.
fn watch(global: Global, tx: Sender<Msg>) {
    let run = || -> Result<()> {
        let ctx = context(&global)?;
        let store = store_of(&ctx)?;
        let mut follow = store.follow_audit()?;
        // The follower's first read is the log so far: the drawing thread got it already.
        let _ = follow.next(Duration::ZERO)?;
        let mut changes = store.changes()?;
        loop {
            ctx.set_now(clock::now()?);
            // The events first: the fleet read after them shows every change they tell of
            // that is in place (the next read, which the change wakes, shows the rest).
            let events = follow.next(Duration::ZERO).unwrap_or_default();
            let fleet = fleet::snapshot(&ctx, &*store);
            let msg = match fleet {
                Ok(f) => Msg::Fleet(Box::new(f), events),
                Err(e) => Msg::StoreError(e.to_string()),
            };
            if tx.send(msg).is_err() {
                return Ok(());
            }
            changes.wait(REFRESH);
        }
    };
    if let Err(e) = run() {
        let _ = tx.send(Msg::StoreError(e.to_string()));
    }
}

/// The worker: notes of a key, and the commands a person confirmed.
fn work(global: Global, jobs: Receiver<Job>, tx: Sender<Msg>) {
    for job in jobs {
        let msg = match job {
            Job::Notes(key) => {
                let (notes, why) = super::key_detail(&global, &key);
                Msg::Notes(key, notes, why)
            }
            Job::Run {
                command,
                options,
                key,
            } => Msg::Done(super::act_on(&global, command, &options, &key).1),
        };
        if tx.send(msg).is_err() {
            return;
        }
    }
}

fn live(a: &Args) -> Result<()> {
    // Fail before taking the screen: no store, no view.
    let ctx = context(&a.global)?;
    let store = store_of(&ctx)?;
    let mut app = App::new(a, &ctx);
    app.events = recent_events(&*store)?;
    drop(store);

    let (tx, rx) = mpsc::channel::<Msg>();
    let (jobs_tx, jobs_rx) = mpsc::channel::<Job>();
    {
        let (g, tx) = (a.global.clone(), tx.clone());
        std::thread::spawn(move || watch(g, tx));
    }
    {
        let (g, tx) = (a.global.clone(), tx.clone());
        std::thread::spawn(move || work(g, jobs_rx, tx));
    }
    {
        let tx = tx.clone();
        std::thread::spawn(move || {
            while let Ok(ev) = event::read() {
                if tx.send(Msg::Input(ev)).is_err() {
                    return;
                }
            }
        });
    }
    crate::signals::install();
    let mut term =
        ratatui::try_init().map_err(|e| Error::Store(format!("cannot use the terminal: {e}")))?;
    let result = (|| -> Result<()> {
        loop {
            let now = clock::now().unwrap_or(ctx.now());
            term.draw(|f| draw::draw(f, &app, now))
                .map_err(|e| Error::Store(format!("cannot draw: {e}")))?;
            let first = match rx.recv_timeout(REFRESH) {
                Ok(m) => Some(m),
                Err(RecvTimeoutError::Timeout) => None,
                Err(RecvTimeoutError::Disconnected) => return Ok(()),
            };
            // A burst of changes is drawn once.
            for m in first.into_iter().chain(rx.try_iter()) {
                if let Some(job) = app.take(m) {
                    let _ = jobs_tx.send(job);
                }
            }
            if app.quit || crate::signals::received().is_some() {
                return Ok(());
            }
        }
    })();
    ratatui::restore();
    result
}
