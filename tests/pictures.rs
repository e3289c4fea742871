//! The README's pictures, made from the real `tasklock demo`: the terminal view (`tasklock
//! top` in tmux, captured with its colours and drawn as an SVG) and the page (`tasklock
//! demo --ui` in headless Chromium, a PNG). Each is taken once the fleet shows several
//! agents, a queue, a death and a freeze, and checked for what makes it a good picture.
//!
//! Normally they are written under target/ (test artefacts, to look at);
//! `TASKLOCK_PICTURES=update` writes them into docs/pictures/, which is what
//! `scripts/pictures.sh` runs.

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::browser::Browser;
use common::tmux::Tmux;

/// The terminal's size, in cells, and the page's, in pixels.
const TERMINAL: (u16, u16) = (130, 34);
const PAGE: (u32, u32) = (1400, 900);

/// The demo's agents (src/demo/fleet.rs names them in this order).
const NAMES: &[&str] = &["alice", "bob", "carol", "dave", "erin", "frank"];

/// What the view shows of a queue, a freeze and a death. (Not the death's release among
/// the events: the newest few scroll it away within a second or two.)
const SCENE: &[&str] = &["waits for", "frozen: deploy://prod*", "dead: process_gone"];

/// How long a picture may take to come (a guard against a hang: the debug build's demo
/// beside a browser on a busy machine takes a while to make its past).
const HANG: Duration = Duration::from_secs(40);

/// Where the pictures go: docs/pictures/ with `TASKLOCK_PICTURES=update`, else target/.
fn out_dir() -> PathBuf {
    let dir = match std::env::var("TASKLOCK_PICTURES").as_deref() {
        Ok("update") => Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/pictures"),
        Ok("") | Err(_) => Path::new(env!("CARGO_TARGET_TMPDIR")).join("pictures"),
        Ok(other) => panic!("TASKLOCK_PICTURES={other}: only `update` is known"),
    };
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The environment that could point the demo elsewhere, or change how it looks.
const UNSET: &[&str] = &[
    "TASKLOCK_DIR",
    "TASKLOCK_URL",
    "TASKLOCK_NOW",
    "TASKLOCK_AGENT",
    "NO_COLOR",
];

/// The rows of an SVG picture of a terminal: the text of its `<text>` elements, row by
/// row (by their `y`, a blank between two), after the title. Parsing it proves it well-formed XML.
fn svg_rows(svg: &str) -> Vec<String> {
    let doc = roxmltree::Document::parse(svg).expect("the SVG is XML");
    let mut rows: Vec<(f64, String)> = Vec::new();
    for t in doc.descendants().filter(|n| n.has_tag_name("text")) {
        let y: f64 = t.attribute("y").unwrap().parse().unwrap();
        let text = t.text().unwrap_or("");
        match rows.last_mut() {
            Some((last, row)) if *last == y => {
                row.push(' ');
                row.push_str(text);
            }
            _ => rows.push((y, text.to_string())),
        }
    }
    rows.into_iter().map(|(_, r)| r).collect()
}

#[test]
fn the_terminal_picture() {
    let tmp = tempfile::tempdir().unwrap();
    let (cols, rows) = TERMINAL;
    let script = format!(
        "cd '{tmp}'; export TMPDIR='{tmp}'; unset {unset}; '{bin}' demo; echo EXITED $?; sleep 600",
        tmp = tmp.path().display(),
        unset = UNSET.join(" "),
        bin = env!("CARGO_BIN_EXE_tasklock"),
    );
    let t = Tmux::start(&script, cols, rows);
    // Several agents, a queue, a death (its keys handed on), a freeze: on screen at once,
    // in the capture the picture is drawn from.
    let start = Instant::now();
    let (ansi, screen) = loop {
        let ansi = t.ok(&["capture-pane", "-e", "-p", "-t", common::tmux::SESSION]);
        let s = common::svg::text(&ansi, cols.into());
        if NAMES.iter().filter(|n| s.contains(*n)).count() >= 4
            && SCENE.iter().all(|w| s.contains(w))
        {
            break (ansi, s);
        }
        assert!(start.elapsed() < HANG, "never saw the fleet at work:\n{s}");
        std::thread::sleep(Duration::from_millis(40));
    };
    t.keys(&["q"]);
    t.shows("EXITED 0");

    let svg = common::svg::svg(&ansi, cols, rows, "tasklock demo");
    let file = out_dir().join("top.svg");
    std::fs::write(&file, &svg).unwrap();
    eprintln!("wrote {}", file.display());

    let text = svg_rows(&svg).join("\n");
    assert!(text.starts_with("tasklock demo\ntasklock top · "), "{text}");
    let names = NAMES.iter().filter(|n| text.contains(*n)).count();
    assert!(
        names >= 4,
        "{names} agents in:\n{text}\n(the screen:\n{screen})"
    );
    for what in SCENE {
        assert!(text.contains(what), "no {what:?} in:\n{text}");
    }
    let tmp_path = tmp.path().display().to_string();
    assert!(
        !svg.contains(&tmp_path) && !svg.contains("/tmp") && !svg.contains("tasklock-demo-"),
        "a temporary path in the picture:\n{text}"
    );
    assert!(!svg.contains("<script"), "{svg}");
    // Drawn in the view's colours: the dead agent in bold red.
    assert!(
        svg.contains("fill=\"#ff7b72\" font-weight=\"bold\">dead: process_gone"),
        "{svg}"
    );
}

/// `tasklock demo --ui`, ended (SIGTERM) when dropped.
struct Demo(Child);

impl Drop for Demo {
    fn drop(&mut self) {
        if self.0.try_wait().is_ok_and(|s| s.is_none()) {
            // SAFETY: a plain kill(2) of our own child, not yet waited for.
            unsafe { libc::kill(self.0.id() as i32, libc::SIGTERM) };
            let _ = self.0.wait();
        }
    }
}

/// The width and height in a PNG's header; panics when it is no PNG.
fn png_size(png: &[u8]) -> (u32, u32) {
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "not a PNG");
    assert_eq!(&png[12..16], b"IHDR", "a PNG starts with its header");
    let be = |b: &[u8]| u32::from_be_bytes(b.try_into().unwrap());
    (be(&png[16..20]), be(&png[20..24]))
}

/// What the page must show before its picture is taken: the fleet at work (on issues,
/// with the paths they edit), a queue, a death, a freeze, and a past (a key held ten
/// minutes or more in the last hour: the timeline has more to show than the last
/// seconds), the timeline drawn.
const FLEET_SHOWN: &str = "
    const text = id => (document.getElementById(id) || {innerText: ''}).innerText;
    const names = ['alice', 'bob', 'carol', 'dave', 'erin', 'frank']
        .filter(n => text('agents').includes(n)).length;
    const paths = [...document.querySelectorAll('#checkouts tbody tr')]
        .some(r => r.cells[6].innerText.trim() !== '');
    const past = [...document.querySelectorAll('#time tbody tr')]
        .some(r => /^([1-9][0-9]+m|[0-9]+h)/.test(r.cells[1].innerText));
    const t = document.getElementById('timeline');
    return names >= 4 && text('checkouts').includes('issue-') && paths
        && text('waits').includes('waits for') && text('waits').includes('deploy://prod*')
        && text('agents').includes('dead')
        && past && t.complete && t.naturalWidth > 100;";

/// The number of distinct colours in a PNG (every 7th pixel), as the browser decodes it.
const COLOURS: &str = "
    const done = arguments[arguments.length - 1];
    const img = new Image();
    img.onload = () => {
        const c = document.createElement('canvas');
        c.width = img.width; c.height = img.height;
        const g = c.getContext('2d');
        g.drawImage(img, 0, 0);
        const d = g.getImageData(0, 0, c.width, c.height).data;
        const seen = new Set();
        for (let i = 0; i < d.length; i += 4 * 7) seen.add((d[i] << 16) | (d[i + 1] << 8) | d[i + 2]);
        done(seen.size);
    };
    img.onerror = () => done(-1);
    img.src = 'data:image/png;base64,' + PNG;";

#[test]
fn the_page_picture() {
    let tmp = tempfile::tempdir().unwrap();
    // The page is opened in the test's browser, not by the demo in the person's.
    let bin = tempfile::tempdir().unwrap();
    let opener = bin.path().join("xdg-open");
    std::fs::write(&opener, "#!/bin/sh\nexit 0\n").unwrap();
    std::fs::set_permissions(&opener, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tasklock"));
    for v in UNSET {
        cmd.env_remove(v);
    }
    let path = format!(
        "{}:{}",
        bin.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut demo = Demo(
        cmd.args(["demo", "--ui"])
            .current_dir(tmp.path())
            .env("TMPDIR", tmp.path())
            .env("PATH", path)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    );
    let mut line = String::new();
    BufReader::new(demo.0.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line
        .trim()
        .strip_prefix("tasklock ui: ")
        .unwrap_or_else(|| panic!("no URL: {line:?}"))
        .to_string();

    let b = Browser::start();
    b.viewport(PAGE.0, PAGE.1);
    b.go(&url);
    b.until_within("the fleet at work", FLEET_SHOWN, HANG);
    // The timeline by agent: a row each (by key, one per issue pushes the agents, the
    // waits and the freeze out of the picture).
    b.js("document.querySelector('#by button[data-by=agent]').click()");
    b.until(
        "the timeline by agent",
        "const i = document.getElementById('timeline'); return i.src.includes('by=agent') \
         && i.complete && i.naturalWidth > 100",
    );
    let text = b.js("return document.body.innerText");
    let text = text.as_str().unwrap();
    let tmp_path = tmp.path().display().to_string();
    assert!(
        !text.contains(&tmp_path) && !text.contains("/tmp") && !text.contains("tasklock-demo-"),
        "a temporary path on the page:\n{text}"
    );
    let shot = b.screenshot_base64();
    let png = common::browser::base64_decode(&shot);
    let file = out_dir().join("page.png");
    std::fs::write(&file, &png).unwrap();
    eprintln!("wrote {}", file.display());

    assert_eq!(png_size(&png), PAGE);
    b.go("about:blank");
    let colours = b.js_async(&COLOURS.replace("PNG", &format!("'{shot}'")));
    let colours = colours.as_i64().unwrap();
    assert!(
        colours >= 16,
        "{colours} colours: the picture is not the page"
    );

    // SAFETY: a plain kill(2) of our own child.
    unsafe { libc::kill(demo.0.id() as i32, libc::SIGTERM) };
    let start = Instant::now();
    let status = loop {
        if let Some(s) = demo.0.try_wait().unwrap() {
            break s;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the demo did not end"
        );
        std::thread::sleep(Duration::from_millis(40));
    };
    assert_eq!(status.code(), Some(0));
}

#[test]
fn the_svg_writer_keeps_text_as_text_in_its_colours() {
    // Markup, an ampersand, a control character; bold red, 256 colours, reverse video,
    // and another escape (a title) skipped.
    let ansi = "\x1b]0;title\x07\x1b[1;31m<script>&x\x01\x1b[0m  \x1b[38;5;2mok\x1b[0m\n\
                \x1b[7m rev \x1b[27mplain";
    let svg = common::svg::svg(ansi, 20, 3, "a <b> & c");
    let rows = svg_rows(&svg);
    assert_eq!(rows, ["a <b> & c", "<script>&x? ok", "rev plain"], "{svg}");
    assert!(!svg.contains("<script"), "{svg}");
    assert!(
        svg.contains("fill=\"#ff7b72\" font-weight=\"bold\">&lt;script&gt;&amp;x?</text>"),
        "{svg}"
    );
    // Colour 2 of 256 is the palette's green; reverse video draws the default text colour
    // behind the default background's.
    assert!(svg.contains("fill=\"#3fb950\">ok</text>"), "{svg}");
    assert!(svg.contains("fill=\"#c9d1d9\"/>"), "{svg}");
    assert!(svg.contains("fill=\"#0d1117\">rev</text>"), "{svg}");
}
