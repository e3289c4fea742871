//! `tasklock top`: the fleet, live, in the terminal.
//!
//! Threads: the store's watcher reads a snapshot (`engine::fleet`) and the new audit
//! events each time the store says something changed (inotify or kqueue on the lock
//! directory, `LISTEN` on PostgreSQL), and at least once a second for leases and
//! heartbeats; a worker reads a key's notes and runs the actions a person asks for; a
//! reader turns keystrokes into messages. The drawing thread owns the screen and does no
//! I/O but the drawing. Looking takes no lock and writes nothing.

mod draw;

use std::collections::VecDeque;
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
    let now = ctx.now;
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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pane {
    Checkouts,
    Agents,
    Events,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sort {
    Key,
    LeaseLeft,
    Held,
}

impl Sort {
    fn word(self) -> &'static str {
        match self {
            Sort::Key => "key",
            Sort::LeaseLeft => "lease left",
            Sort::Held => "time held",
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
    selected: [usize; 3],
    filter: String,
    sort: Sort,
    mode: Mode,
    detail: Option<Detail>,
    message: Option<String>,
    error: Option<String>,
    color: bool,
    /// Whether this view may force-release and freeze, or why not.
    can_act: std::result::Result<(), String>,
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
            selected: [0; 3],
            filter: String::new(),
            sort: Sort::Key,
            mode: Mode::Normal,
            detail: None,
            message: None,
            error: None,
            color,
            can_act: super::may_act(a.read_only, &a.global, ctx),
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
        match self.sort {
            Sort::Key => {}
            Sort::LeaseLeft => v.sort_by_key(|c| c.view.expires_at),
            Sort::Held => v.sort_by_key(|c| c.view.acquired_at),
        }
        v
    }

    fn visible_agents(&self) -> Vec<&FleetAgent> {
        let Some(fl) = &self.fleet else {
            return Vec::new();
        };
        fl.agents
            .iter()
            .filter(|a| {
                self.matches(&[&a.row.id, a.row.name.as_deref().unwrap_or("")])
                    || a.row.checkouts.iter().any(|k| self.matches(&[k]))
            })
            .collect()
    }

    /// Newest first.
    fn visible_events(&self) -> Vec<&AuditEvent> {
        self.events
            .iter()
            .rev()
            .filter(|e| self.matches(&[&e.key, &e.agent, &e.event]))
            .collect()
    }

    fn pane_len(&self) -> usize {
        match self.focus {
            Pane::Checkouts => self.visible_checkouts().len(),
            Pane::Agents => self.visible_agents().len(),
            Pane::Events => self.visible_events().len(),
        }
    }

    fn pane_index(&self) -> usize {
        match self.focus {
            Pane::Checkouts => 0,
            Pane::Agents => 1,
            Pane::Events => 2,
        }
    }

    fn selected_key(&self) -> Option<String> {
        match self.focus {
            Pane::Checkouts => self
                .visible_checkouts()
                .get(self.selected[0])
                .map(|c| c.view.key.clone()),
            Pane::Events => self
                .visible_events()
                .get(self.selected[2])
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
                self.selected = [0; 3];
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
                            prompt: format!("Freeze {} for {}?", draw::inert(&key), input.trim()),
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
        if self.detail.is_some() {
            if matches!(k.code, KeyCode::Esc | KeyCode::Enter | KeyCode::Char('q')) {
                self.detail = None;
            }
            return None;
        }
        let i = self.pane_index();
        let len = self.pane_len();
        match k.code {
            KeyCode::Char('q') | KeyCode::Esc => self.quit = true,
            KeyCode::Tab | KeyCode::Right => {
                self.focus = match self.focus {
                    Pane::Checkouts => Pane::Agents,
                    Pane::Agents => Pane::Events,
                    Pane::Events => Pane::Checkouts,
                }
            }
            KeyCode::BackTab | KeyCode::Left => {
                self.focus = match self.focus {
                    Pane::Checkouts => Pane::Events,
                    Pane::Agents => Pane::Checkouts,
                    Pane::Events => Pane::Agents,
                }
            }
            KeyCode::Char('1') => self.focus = Pane::Checkouts,
            KeyCode::Char('2') => self.focus = Pane::Agents,
            KeyCode::Char('3') => self.focus = Pane::Events,
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
                self.sort = match self.sort {
                    Sort::Key => Sort::LeaseLeft,
                    Sort::LeaseLeft => Sort::Held,
                    Sort::Held => Sort::Key,
                }
            }
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
                            draw::inert(&key)
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
        let mut ctx = context(&global)?;
        let store = store_of(&ctx)?;
        let mut follow = store.follow_audit()?;
        // The follower's first read is the log so far: the drawing thread got it already.
        let _ = follow.next(Duration::ZERO)?;
        let mut changes = store.changes()?;
        loop {
            ctx.now = clock::now()?;
            // The events first: the fleet read after them shows every change they tell of.
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
            let now = clock::now().unwrap_or(ctx.now);
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
