//! A release as the release workflow publishes one, made here from the binary under test
//! and served on loopback: what install.sh, and the plugin's launcher through it, download.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

const REPO: &str = env!("CARGO_MANIFEST_DIR");

/// `scripts/dist.sh` run in `work` on a copy of `bin` (and the `tasklock-mcp` beside it,
/// if any), stripped of its debug information (as release builds are) so that packing it
/// takes no time. Returns the release directory, the archive's name and the binary packed.
pub fn dir(work: &Path, bin: &Path) -> (PathBuf, String, PathBuf) {
    let dir = work.join("release");
    fs::create_dir_all(work.join("tmp")).unwrap();
    fs::create_dir_all(work.join("built")).unwrap();
    let packed = work.join("built/tasklock");
    fs::copy(bin, &packed).unwrap();
    let st = Command::new("strip").arg(&packed).status().expect("strip");
    assert!(st.success(), "strip {}", packed.display());
    let out = Command::new("sh")
        .arg(Path::new(REPO).join("scripts/dist.sh"))
        .arg(&dir)
        .env("TASKLOCK_DIST_BINARY", &packed)
        .env("TMPDIR", work.join("tmp"))
        .output()
        .expect("run scripts/dist.sh");
    assert!(
        out.status.success(),
        "dist.sh: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let archive = String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()
        .and_then(|l| Path::new(l).file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .expect("dist.sh names the archive");
    (dir, archive, packed)
}

#[allow(dead_code)] // tests/npm.rs packs a release but serves none
/// Serve `dir` over HTTP on loopback (GET only; 404 for what is not there) until the
/// test ends. Returns the base URL.
pub fn serve(dir: PathBuf) -> String {
    use std::io::{BufRead, BufReader, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut line = String::new();
            if reader.read_line(&mut line).is_err() {
                continue;
            }
            // Headers up to the blank line.
            let mut h = String::new();
            while reader.read_line(&mut h).is_ok_and(|n| n > 2) {
                h.clear();
            }
            let name = line
                .split_whitespace()
                .nth(1)
                .unwrap_or("/")
                .trim_start_matches('/');
            let mut stream = stream;
            let body = (!name.contains(".."))
                .then(|| fs::read(dir.join(name)).ok())
                .flatten();
            let _ = match body {
                Some(b) => stream
                    .write_all(
                        format!("HTTP/1.0 200 OK\r\nContent-Length: {}\r\n\r\n", b.len())
                            .as_bytes(),
                    )
                    .and_then(|_| stream.write_all(&b)),
                None => stream.write_all(b"HTTP/1.0 404 Not Found\r\nContent-Length: 0\r\n\r\n"),
            };
        }
    });
    url
}
