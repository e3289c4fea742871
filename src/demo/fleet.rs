//! The simulated fleet of `tasklock demo`: agents that take issues from the backlog, add
//! the paths they edit, queue for the shared keys (staging, the migrations), hand them on,
//! finish their work, and now and then die. Every step is a real command line run through
//! [`crate::dispatch::call`] on the demo's own lock directory, so what the view shows is tasklock's
//! own state: a death is found by tasklock (the agent's process is gone) and its keys are
//! released and handed on by tasklock's rules, not by the demo.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use crate::dispatch::Called;
use crate::error::{EXIT_HELD, EXIT_NO_SUCH_CHECKOUT, EXIT_OK};

/// The issues of the backlog: what an agent says it is doing, and the path it edits.
const TASKS: &[(&str, &str)] = &[
    ("fix login redirect", "src/auth/redirect.rs"),
    ("add rate limiting to the API", "src/api/limits/**"),
    ("fix the flaky checkout test", "tests/checkout/**"),
    ("upgrade the postgres driver", "Cargo.toml"),
    ("dark mode for the settings page", "web/settings/**"),
    ("speed up search indexing", "src/search/**"),
    ("retry failed webhooks", "src/webhooks/**"),
    ("translate the onboarding emails", "templates/email/**"),
    ("paginate the audit log", "src/audit/**"),
    ("fix CSV export encoding", "src/export/csv.rs"),
    ("remove the legacy billing API", "src/billing/legacy/**"),
    ("write the deploy runbook", "docs/deploy.md"),
];

/// Keys that several agents need now and then: their queues.
const SHARED: &[(&str, &str)] = &[
    ("deploy://staging", "deploy to staging for QA"),
    ("db/migrations", "add a migration"),
];

/// What agents note on their issues as they go.
const NOTES: &[&str] = &[
    "found the cause; writing a test that shows it",
    "the test fails as expected, fixing now",
    "fix works locally, running the whole suite",
    "opened the PR, waiting for CI",
];

/// The key kept frozen, and why.
const FROZEN: (&str, &str) = ("deploy://prod*", "release freeze until QA signs off");

const NAMES: &[&str] = &[
    "alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "judy", "mallory",
    "niaj", "olivia", "peggy", "rupert", "sybil", "trent", "victor", "walter",
];

/// How many agents the fleet keeps, and the first issue's number.
const AGENTS: usize = 5;
const FIRST_ISSUE: u32 = 141;
/// A death every this many ticks (the first one at [`FIRST_DEATH`]), and a newcomer this
/// many ticks after it.
const DEATH_EVERY: u64 = 45;
const FIRST_DEATH: u64 = 2;
const NEWCOMER_AFTER: u64 = 4;
/// A heartbeat from every agent this often (their processes keep them alive; the beat
/// carries their status), and the freeze made again this often.
const BEAT_EVERY: u64 = 5;
const FREEZE_EVERY: u64 = 1800;
/// The fleet's past, made when the demo starts: this many ticks of [`HISTORY_TICK`]
/// seconds each (45 minutes: most of the page's timeline of the last hour), a heartbeat
/// every [`HISTORY_BEAT_EVERY`] of them (no agent stalls), the freeze made [`FREEZE_AT`]
/// ticks into it. Few ticks: the demo shows its fleet within a second or two.
const HISTORY_TICKS: u64 = 45;
const HISTORY_TICK: i64 = 60;
const HISTORY_BEAT_EVERY: u64 = 2;
const FREEZE_AT: u64 = 25;

/// Act `ticks` ticks of [`HISTORY_TICK`] in the past (0: now): every command of the
/// demo's process judges time by that clock.
fn past(ticks: u64) {
    crate::clock::set_offset(chrono::Duration::seconds(-(ticks as i64) * HISTORY_TICK));
}

/// One simulated agent: its id, the process its liveness is bound to, what it works on.
struct Agent {
    id: String,
    process: Child,
    work: Option<Work>,
    shared: Option<Shared>,
}

/// An issue an agent holds: ticks of work left, and whether it took its path yet.
struct Work {
    key: String,
    task: usize,
    left: u32,
    path: bool,
}

/// A shared key an agent waits for (in its queue) or holds for a few ticks.
struct Shared {
    which: usize,
    held: bool,
    left: u32,
}

/// The fleet: its lock directory, its agents and its clock of ticks.
pub struct Fleet {
    lock: PathBuf,
    agents: Vec<Agent>,
    names_used: usize,
    next_issue: u32,
    tick: u64,
    newcomer_at: Option<u64>,
    rng: u64,
}

impl Fleet {
    pub fn new(lock: PathBuf) -> Fleet {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1)
            ^ u64::from(std::process::id());
        Fleet {
            lock,
            agents: Vec::new(),
            names_used: 0,
            next_issue: FIRST_ISSUE,
            tick: 0,
            newcomer_at: None,
            rng: seed | 1,
        }
    }

    /// The first moments, at once: a backlog, five agents at work, a queue on each shared
    /// key, then 45 minutes of their work (so that the timeline and the events have a
    /// past to show), a freeze within it. An error when tasklock refuses any of it: the
    /// demo cannot run.
    pub fn open(&mut self) -> Result<(), String> {
        past(HISTORY_TICKS);
        let made = self.history();
        // Now again, whatever happened: the live fleet, its clock of ticks started
        // afresh, and a crowd at the shared keys to show at once.
        past(0);
        made?;
        self.tick = 0;
        self.crowd();
        if let Some(w) = &self.agents[0].work {
            let (key, task) = (w.key.clone(), w.task);
            self.add_path(0, &key, task);
        }
        Ok(())
    }

    /// Every agent wants a shared key: one holds each, the others queue for them.
    fn crowd(&mut self) {
        for (i, which) in [(3, 0), (1, 1), (4, 0), (0, 0), (2, 1)] {
            self.want_shared(i, which);
        }
    }

    /// The fleet's start and its work over [`HISTORY_TICKS`] ticks of [`HISTORY_TICK`]
    /// seconds, on a clock set back that far: no death in it (the live fleet shows one at
    /// once).
    fn history(&mut self) -> Result<(), String> {
        self.add_issues(TASKS.len())?;
        for _ in 0..AGENTS {
            self.join()?;
        }
        for i in 0..self.agents.len() {
            self.take_issue(i);
        }
        self.crowd();
        for n in 1..=HISTORY_TICKS {
            past(HISTORY_TICKS - n);
            self.tick += 1;
            self.steps(HISTORY_BEAT_EVERY);
            if n == FREEZE_AT {
                self.freeze()?;
            }
        }
        Ok(())
    }

    /// One tick of the fleet (about a second of it): a death or a newcomer when it is
    /// time, a step of each agent, their heartbeats.
    pub fn tick(&mut self) {
        self.tick += 1;
        let t = self.tick;
        if t == FIRST_DEATH || (t > FIRST_DEATH && (t - FIRST_DEATH).is_multiple_of(DEATH_EVERY)) {
            self.die();
        }
        if self.newcomer_at.is_some_and(|at| t >= at) {
            self.newcomer_at = None;
            let _ = self.join();
        }
        self.steps(BEAT_EVERY);
        if t.is_multiple_of(FREEZE_EVERY) {
            let _ = self.freeze();
        }
    }

    /// A step of each agent, and their heartbeats every `beat_every` ticks.
    fn steps(&mut self, beat_every: u64) {
        for i in 0..self.agents.len() {
            self.step(i);
        }
        if self.tick.is_multiple_of(beat_every) {
            for i in 0..self.agents.len() {
                self.beat(i, None);
            }
        }
    }

    fn freeze(&mut self) -> Result<(), String> {
        let c = self.call(
            "carol",
            &["freeze", FROZEN.0, "--for", "1h", "--reason", FROZEN.1],
        );
        expect(&c, "freeze")
    }

    /// End every agent's process (the fleet ends with the demo).
    pub fn stop(&mut self) {
        for a in &mut self.agents {
            let _ = a.process.kill();
            let _ = a.process.wait();
        }
        self.agents.clear();
    }

    /// A new agent: a process of its own, registered as its long-lived process.
    fn join(&mut self) -> Result<(), String> {
        let n = self.names_used;
        self.names_used += 1;
        let base = NAMES[n % NAMES.len()];
        let id = match n / NAMES.len() {
            0 => base.to_string(),
            round => format!("{base}-{}", round + 1),
        };
        let process = agent_process()?;
        let pid = process.id().to_string();
        let c = self.call(
            &id,
            &["heartbeat", "--pid", &pid, "--status", "reading the code"],
        );
        self.agents.push(Agent {
            id,
            process,
            work: None,
            shared: None,
        });
        expect(&c, "heartbeat")
    }

    /// An agent's process is killed: tasklock finds it dead, and the next command that
    /// meets its checkouts releases them and hands them to their queues' heads. The one
    /// holding a shared key dies first, so that its queue moves on.
    fn die(&mut self) {
        let holds_shared = |a: &Agent| a.shared.as_ref().is_some_and(|s| s.held);
        let Some(i) = (self.agents.iter().position(holds_shared))
            .or_else(|| self.agents.iter().position(|a| a.work.is_some()))
        else {
            return;
        };
        let mut a = self.agents.remove(i);
        let _ = a.process.kill();
        let _ = a.process.wait();
        self.newcomer_at = Some(self.tick + NEWCOMER_AFTER);
    }

    /// What agent `i` does this tick.
    fn step(&mut self, i: usize) {
        if self.agents[i].shared.is_some() {
            self.step_shared(i);
            return;
        }
        let Some(w) = &mut self.agents[i].work else {
            // Not every idle agent starts at once.
            if self.chance(2) {
                self.take_issue(i);
            }
            return;
        };
        w.left = w.left.saturating_sub(1);
        let (key, task, left, path) = (w.key.clone(), w.task, w.left, w.path);
        if left == 0 {
            let note = format!("done: {}", TASKS[task].0);
            self.call(
                &self.agents[i].id.clone(),
                &["release", &key, "--done", "--note", &note],
            );
            self.agents[i].work = None;
            let _ = self.add_issues(1);
            self.beat(i, Some("looking for the next issue".into()));
        } else if !path && self.chance(2) {
            self.add_path(i, &key, task);
        } else if left > 2 && self.chance(6) {
            let which = self.below(SHARED.len() as u64) as usize;
            self.want_shared(i, which);
        } else if self.chance(4) {
            // A checkpoint for whoever comes next, should this agent not finish.
            let note = NOTES[self.below(NOTES.len() as u64) as usize];
            self.call(&self.agents[i].id.clone(), &["note", &key, note]);
        }
    }

    /// An agent in a shared key's queue asks again (it may be its turn; still waiting, it
    /// has nothing new to say in a heartbeat); one that holds it hands it on when done.
    fn step_shared(&mut self, i: usize) {
        let id = self.agents[i].id.clone();
        let Some(s) = &mut self.agents[i].shared else {
            return;
        };
        let (key, reason) = SHARED[s.which];
        if s.held {
            s.left = s.left.saturating_sub(1);
            if s.left == 0 {
                self.agents[i].shared = None;
                self.call(&id, &["release", key, "--note", "done, all yours"]);
                self.beat(i, None);
            }
            return;
        }
        let c = self.call(&id, &["checkout", key, "--queue", "--reason", reason]);
        if c.exit_code != EXIT_HELD {
            self.after_shared(i, c.exit_code);
        }
    }

    /// Agent `i` asks for shared key `which`: it holds it, or joins its queue.
    fn want_shared(&mut self, i: usize, which: usize) {
        let Some(a) = self.agents.get(i) else { return };
        if a.shared.is_some() {
            return;
        }
        let id = a.id.clone();
        let (key, reason) = SHARED[which];
        self.agents[i].shared = Some(Shared {
            which,
            held: false,
            left: 0,
        });
        let c = self.call(&id, &["checkout", key, "--queue", "--reason", reason]);
        self.after_shared(i, c.exit_code);
    }

    fn after_shared(&mut self, i: usize, code: i32) {
        let left = 4 + self.below(4) as u32;
        let Some(s) = &mut self.agents[i].shared else {
            return;
        };
        match code {
            EXIT_OK => {
                s.held = true;
                s.left = left;
            }
            EXIT_HELD => {}
            _ => self.agents[i].shared = None,
        }
        let status = match &self.agents[i].shared {
            Some(s) if s.held => format!("{} …", SHARED[s.which].1),
            Some(s) => format!("waiting for {}", SHARED[s.which].0),
            None => return,
        };
        self.beat(i, Some(status));
    }

    /// Agent `i` claims the next issue of the backlog, and says why it holds it.
    fn take_issue(&mut self, i: usize) {
        let id = self.agents[i].id.clone();
        let c = self.call(&id, &["checkout", "--next"]);
        if c.exit_code == EXIT_NO_SUCH_CHECKOUT {
            // The backlog is empty: the product owner fills it.
            let _ = self.add_issues(3);
            return;
        }
        let Some(key) = c.json["key"].as_str().filter(|_| c.exit_code == EXIT_OK) else {
            return;
        };
        let task = task_of(key);
        let reason = TASKS[task].0;
        self.call(&id, &["checkout", key, "--reason", reason]);
        let left = 6 + self.below(10) as u32;
        self.agents[i].work = Some(Work {
            key: key.to_string(),
            task,
            left,
            path: false,
        });
        self.beat(i, Some(format!("working on {key}")));
    }

    /// Agent `i` takes the path its issue edits, beside the issue's key: in the project
    /// the lock directory is in (named in full: the demo runs elsewhere).
    fn add_path(&mut self, i: usize, key: &str, task: usize) {
        let id = self.agents[i].id.clone();
        let project = self.lock.parent().unwrap_or(&self.lock);
        let path = project.join(TASKS[task].1).to_string_lossy().into_owned();
        let c = self.call(&id, &["checkout", key, "--path", &path]);
        if let Some(w) = &mut self.agents[i].work {
            // Refused (another agent edits an overlapping path): it goes on without.
            w.path = true;
        }
        let _ = c;
    }

    /// `n` new issues at the end of the backlog.
    fn add_issues(&mut self, n: usize) -> Result<(), String> {
        let keys: Vec<String> = (0..n)
            .map(|k| format!("issue-{}", self.next_issue + k as u32))
            .collect();
        self.next_issue += n as u32;
        let mut args = vec!["backlog", "add"];
        args.extend(keys.iter().map(String::as_str));
        let c = self.call("product-owner", &args);
        expect(&c, "backlog add")
    }

    fn beat(&mut self, i: usize, status: Option<String>) {
        let id = self.agents[i].id.clone();
        let mut args = vec!["heartbeat"];
        if let Some(s) = &status {
            args.extend(["--status", s]);
        }
        self.call(&id, &args);
    }

    /// `tasklock --dir LOCK --agent AGENT ARGS…`, in this process.
    fn call(&self, agent: &str, args: &[&str]) -> Called {
        let mut argv: Vec<std::ffi::OsString> = vec!["tasklock".into(), "--dir".into()];
        argv.push(self.lock.clone().into_os_string());
        argv.extend(["--agent", agent].map(Into::into));
        argv.extend(args.iter().map(Into::into));
        let called = crate::dispatch::call(argv);
        // Nobody to push the inbox messages to, but what was queued for it goes.
        crate::engine::deliver::flush();
        called
    }

    /// True once in `n` times.
    fn chance(&mut self, n: u64) -> bool {
        self.below(n) == 0
    }

    /// A number below `n` (xorshift: a demo needs no better).
    fn below(&mut self, n: u64) -> u64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng % n.max(1)
    }
}

/// The task an issue's key stands for.
fn task_of(key: &str) -> usize {
    let n: u32 = key
        .trim_start_matches("issue-")
        .parse()
        .unwrap_or(FIRST_ISSUE);
    (n.saturating_sub(FIRST_ISSUE) as usize) % TASKS.len()
}

fn expect(c: &Called, what: &str) -> Result<(), String> {
    if c.exit_code == EXIT_OK {
        return Ok(());
    }
    Err(format!(
        "`tasklock {what}` failed in the demo's lock directory: {}",
        c.markdown.trim()
    ))
}

/// A process standing for an agent's session: it lives until killed, or until the
/// demo ends (it dies with it), in a process group of its own so that Ctrl-C at the
/// terminal reaches the demo, not the agents.
fn agent_process() -> Result<Child, String> {
    use std::os::unix::process::CommandExt;
    let parent = std::process::id() as libc::pid_t;
    let mut cmd = Command::new("sleep");
    cmd.arg("86400")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0);
    // SAFETY: die_with_parent makes async-signal-safe calls only; nothing is allocated.
    unsafe {
        cmd.pre_exec(move || {
            crate::os::die_with_parent(parent, libc::SIGKILL);
            Ok(())
        });
    }
    cmd.spawn()
        .map_err(|e| format!("cannot start `sleep` for a simulated agent's process: {e}"))
}
