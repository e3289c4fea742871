//! Claude Code's agent teams end to end: a lead session in tmux (agent teams enabled as
//! Claude Code's docs say, teammates in panes of their own) in a project set up by
//! `tasklock init`, a stub model playing the lead and two teammates, and the teammates'
//! `TaskUpdate` claims of one task going through tasklock's PreToolUse hook. See
//! `tests/e2e/teams.rs` and docs/e2e.md.
//!
//! The first run installs the CLI from npm into target/e2e/node (see docs/e2e.md).

mod e2e;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use e2e::teams::{Gate, MateStep, Team, TeamStub};
use e2e::{audit, git_project, result_text, tasklock_bin, tasklock_init};

/// Three Claude Code processes on a loaded 2-core machine: generous.
const TIMEOUT: Duration = Duration::from_secs(180);

/// A home and a git repository set up by `tasklock init`, whose user lets the Task tools
/// and teammates run without asking.
fn project() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let project = git_project(tmp.path());
    tasklock_init(&project);
    let local = json!({"permissions": {"allow": ["TaskCreate", "TaskUpdate", "TaskList", "TaskGet", "Agent"]}});
    std::fs::write(
        project.join(".claude/settings.local.json"),
        local.to_string(),
    )
    .unwrap();
    (tmp, home, project)
}

fn claim(i: usize, gate: Gate) -> MateStep {
    MateStep {
        update: json!({"taskId": "1", "owner": format!("mate{i}"), "status": "in_progress"}),
        gate,
        if_granted: false,
    }
}

fn complete() -> MateStep {
    MateStep {
        update: json!({"taskId": "1", "status": "completed"}),
        gate: Gate::None,
        if_granted: true,
    }
}

/// `tasklock status KEY --json` in the project.
fn status(project: &Path, key: &str) -> Value {
    let out = std::process::Command::new(tasklock_bin())
        .args(["status", key, "--json", "--dir"])
        .arg(project.join(".locks"))
        .env_remove("TASKLOCK_AGENT")
        .env_remove("CLAUDE_CODE_SESSION_ID")
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout).expect("status --json")
}

/// Dropped in this order: the team's processes first, while its tmux socket still exists.
struct Run {
    team: Team,
    stub: TeamStub,
    project: PathBuf,
    _tmp: tempfile::TempDir,
}

impl Run {
    fn start(mates: Vec<Vec<MateStep>>) -> Run {
        let (tmp, home, project) = project();
        let stub = TeamStub::start(mates);
        let team = Team::start(&home, &project, &stub);
        team.type_prompt("Split the work among two teammates", &stub);
        Run {
            team,
            stub,
            project,
            _tmp: tmp,
        }
    }

    fn context(&self) -> String {
        let audit: Vec<String> = audit(&self.project.join(".locks"))
            .iter()
            .map(Value::to_string)
            .collect();
        format!(
            "{}\n{}\n--- audit.jsonl\n{}",
            self.team.screens(),
            self.stub.dump(),
            audit.join("\n")
        )
    }

    fn result(&self, id: &str) -> Value {
        self.stub
            .wait_for_result(id, TIMEOUT)
            .unwrap_or_else(|| panic!("no result for {id}\n{}", self.context()))
    }

    fn audit(&self, event: &str, key: &str) -> Vec<Value> {
        audit(&self.project.join(".locks"))
            .into_iter()
            .filter(|v| v["event"] == event && v["key"] == key)
            .collect()
    }
}

#[test]
fn two_teammates_claim_one_task_at_once_and_exactly_one_wins() {
    let started = Instant::now();
    // Both claims are answered only once both teammates asked: they race in Claude Code.
    let run = Run::start(vec![
        vec![claim(0, Gate::All), complete()],
        vec![claim(1, Gate::All), complete()],
    ]);
    let results = [run.result("mate0-0"), run.result("mate1-0")];
    let granted: Vec<usize> = (0..2).filter(|&i| results[i]["is_error"] != true).collect();
    assert_eq!(
        granted.len(),
        1,
        "exactly one claim wins\n{}",
        run.context()
    );
    let (w, l) = (granted[0], 1 - granted[0]);
    let team = run.team.team_name();
    let key = format!("task:{team}/1");

    // The loser's model read the refusal, naming the winner.
    let refusal = result_text(&results[l]);
    assert!(
        refusal.contains("tasklock: task #1 is already claimed")
            && refusal.contains(&format!("mate{w} in team {team}"))
            && refusal.contains(&format!("`{key}`")),
        "the refusal names the winner: {refusal}\n{}",
        run.context()
    );
    assert!(
        result_text(&results[w]).contains("Updated task #1"),
        "{}",
        run.context()
    );

    // The winner completes it: the key is released, done, and free.
    let done = run.result(&format!("mate{w}-1"));
    assert!(done["is_error"] != true, "{done}\n{}", run.context());
    let acquired = run.audit("acquire", &key);
    assert_eq!(acquired.len(), 1, "{}", run.context());
    assert_eq!(acquired[0]["name"], format!("mate{w} in team {team}"));
    let deadline = Instant::now() + TIMEOUT;
    while run.audit("release", &key).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let released = run.audit("release", &key);
    assert_eq!(released.len(), 1, "{}", run.context());
    assert_eq!(released[0]["agent"], acquired[0]["agent"]);
    assert_eq!(
        released[0]["reason"],
        "task #1 completed in Claude Code's task list"
    );
    assert_eq!(status(&run.project, &key)["outcome"], "free");
    eprintln!("e2e: teams race took {:?}", started.elapsed());
}

#[test]
fn a_teammate_killed_with_kill_9_leaves_its_task_free() {
    // mate0 claims the task and keeps it; mate1's claim waits until mate0 is killed.
    let run = Run::start(vec![vec![claim(0, Gate::None)], vec![claim(1, Gate::Test)]]);
    let first = run.result("mate0-0");
    assert!(first["is_error"] != true, "{first}\n{}", run.context());
    let team = run.team.team_name();
    let key = format!("task:{team}/1");
    assert_eq!(
        status(&run.project, &key)["checkout"]["agent"]["name"],
        format!("mate0 in team {team}"),
        "{}",
        run.context()
    );

    let pid = run.team.teammate_pid("mate0").unwrap_or_else(|| {
        let ps = std::process::Command::new("ps")
            .args(["-eo", "pid,args"])
            .output()
            .unwrap();
        let ps = String::from_utf8_lossy(&ps.stdout);
        let claude: Vec<&str> = ps.lines().filter(|l| l.contains("agent-name")).collect();
        panic!("no process of mate0 in {claude:?}\n{}", run.context())
    });
    // SAFETY: kill has no memory-safety preconditions.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGKILL) }, 0);
    let gone = Instant::now() + TIMEOUT;
    while tasklock::os::process(pid).is_some_and(|p| !p.zombie) && Instant::now() < gone {
        std::thread::sleep(Duration::from_millis(50));
    }

    run.stub.open(1);
    let second = run.result("mate1-0");
    assert!(
        second["is_error"] != true && result_text(&second).contains("Updated task #1"),
        "the dead teammate's task is free again: {second}\n{}",
        run.context()
    );
    // mate0's checkout ended with its death, then mate1's claim was granted. Read from the
    // audit log: mate1 may already have finished, and Claude Code then completes its task
    // (a release), before a look at the key's status would run.
    let ended = run.audit("auto_release", &key);
    assert_eq!(ended.len(), 1, "{}", run.context());
    assert_eq!(
        (&ended[0]["name"], &ended[0]["reason"]),
        (
            &Value::from(format!("mate0 in team {team}")),
            &Value::from("agent_death")
        ),
        "{}",
        run.context()
    );
    let acquired = run.audit("acquire", &key);
    assert_eq!(
        acquired.last().map(|a| &a["name"]),
        Some(&Value::from(format!("mate1 in team {team}"))),
        "{}",
        run.context()
    );
    assert_eq!(acquired.len(), 2, "{}", run.context());
}
