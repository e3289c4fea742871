//! The Gemini CLI extension (`plugins/gemini`): its copies of the skills, hooks and
//! instructions are the sources' own, and the real Gemini CLI installs it from the
//! repository (`gemini extensions install PATH`), after which its hooks run and its skills
//! reach the model in a project that `tasklock init` never touched.

mod e2e;

use std::io::Write;
use std::path::Path;
use std::process::Stdio;

use serde_json::Value;

use e2e::gemini::{GeminiScript, GeminiStub, gemini_bare, gemini_cmd, gemini_home, session_id};
use e2e::{COMMAND_TIMEOUT, Running, SESSION_TIMEOUT, git_project, repo_root};

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

fn names(dir: &Path) -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .flatten()
        .filter(|e| e.path().join("SKILL.md").is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    out.sort();
    out
}

/// The extension's files are copies (`gemini extensions install` copies the directory):
/// they must be the sources' (`sh scripts/gemini-plugin.sh` writes them).
#[test]
fn the_gemini_extension_holds_this_versions_skills_hooks_and_instructions() {
    let root = repo_root();
    let ext = root.join("plugins/gemini");
    let stale = "is stale: run sh scripts/gemini-plugin.sh";
    assert_eq!(names(&ext.join("skills")), names(&root.join("skills")));
    for name in names(&root.join("skills")) {
        assert!(
            read(&ext.join("skills").join(&name).join("SKILL.md"))
                == read(&root.join("skills").join(&name).join("SKILL.md")),
            "plugins/gemini/skills/{name} {stale}"
        );
    }
    assert!(
        read(&ext.join("hooks/hooks.json")) == read(&root.join("templates/gemini-settings.json")),
        "plugins/gemini/hooks/hooks.json {stale}"
    );
    assert!(
        read(&ext.join("GEMINI.md")) == read(&root.join("templates/instructions.md")),
        "plugins/gemini/GEMINI.md {stale}"
    );
    let manifest: Value = serde_json::from_slice(&read(&ext.join("gemini-extension.json")))
        .expect("gemini-extension.json is JSON");
    assert_eq!(manifest["name"], "tasklock");
    assert_eq!(manifest["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(manifest["contextFileName"], "GEMINI.md");
}

#[test]
fn gemini_installs_the_extension_and_its_hooks_and_skills_work() {
    let tmp = tempfile::tempdir().unwrap();
    let project = git_project(tmp.path());
    assert!(
        !project.join(".gemini").exists(),
        "no project hooks: only the extension's"
    );
    let stub = GeminiStub::start(GeminiScript {
        steps: vec![GeminiScript::shell("tasklock checkout ext-task")],
        hold_after: None,
        sessions: 1,
        wait_for_go: false,
    });
    let home = tmp.path().join("home");
    gemini_home(&home);

    // `gemini extensions install PATH --consent` asks whether to trust the source folder.
    let mut child = gemini_bare(&home, &project, &stub)
        .arg("extensions")
        .arg("install")
        .arg(repo_root().join("plugins/gemini"))
        .arg("--consent")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start gemini extensions install");
    child.stdin.take().unwrap().write_all(b"y\n").unwrap();
    let out = wait_with_timeout(child, COMMAND_TIMEOUT);
    assert!(
        out.0
            && out
                .1
                .contains("Extension \"tasklock\" installed successfully"),
        "{}",
        out.1
    );
    let installed = home.join(".gemini/extensions/tasklock");
    assert!(installed.join("hooks/hooks.json").is_file());

    let session = Running::spawn(
        gemini_cmd(&home, &project, &stub, "Check out the task."),
        "gemini -p (extension)",
    )
    .wait(SESSION_TIMEOUT);
    let context = format!("{}\n--- stub\n{}", session.text(), stub.log());
    assert!(session.status.success(), "{context}");
    let id = session_id(&session.stdout).expect("gemini -o json names its session");
    let checkout = stub.outputs_of(0).remove(&id).unwrap_or_default();
    assert!(
        checkout.contains("Checked out `ext-task`"),
        "{checkout}\n{context}"
    );
    let audit = e2e::audit(&project.join(".locks"));
    let released = audit
        .iter()
        .find(|e| e["event"] == "auto_release" && e["key"] == "ext-task")
        .unwrap_or_else(|| panic!("never released: {audit:?}\n{context}"));
    assert_eq!(released["agent"], id.as_str());
    assert_eq!(released["reason"], "session_end");
    // The skills and the instructions reached the model.
    for needle in [
        "Check out a task before working on it so no other agent works on the same thing",
        "Show which tasks are checked out by which agents with tasklock",
        "<!-- tasklock:begin -->",
    ] {
        assert!(
            stub.any_body_contains(needle),
            "{needle:?} never reached the model\n{context}"
        );
    }
}

/// Wait for `child` (its output piped), killing it after `timeout`: (success, all output).
fn wait_with_timeout(
    mut child: std::process::Child,
    timeout: std::time::Duration,
) -> (bool, String) {
    let started = std::time::Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let out = child.wait_with_output().unwrap();
            return (
                status.success(),
                format!(
                    "{}{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                ),
            );
        }
        if started.elapsed() > timeout {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "gemini extensions install did not finish\n{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}
