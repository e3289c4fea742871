//! A real browser for the tests of `tasklock ui`'s page: Debian's Chromium, headless,
//! driven through chromedriver (WebDriver over HTTP), and the small HTTP client that talks
//! to both the page's server and chromedriver.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// One HTTP answer: its status, its head (status line and headers), its body.
pub struct Answer {
    pub status: u16,
    pub head: String,
    pub body: String,
}

impl Answer {
    pub fn header(&self, name: &str) -> Option<String> {
        self.head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
        })
    }
}

/// One HTTP/1.1 request to 127.0.0.1:`port`, its connection closed after the answer.
pub fn http(port: u16, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Answer {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    // Starting Chromium on a busy machine can take a while.
    s.set_read_timeout(Some(Duration::from_secs(180))).unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str(&format!(
        "Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    ));
    s.write_all(req.as_bytes()).unwrap();
    // Read the head, then the body by its length (chromedriver keeps connections open),
    // chunk by chunk, or to the end.
    let mut r = BufReader::new(s);
    let mut head = String::new();
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).unwrap() == 0 || line == "\r\n" {
            break;
        }
        head.push_str(&line);
    }
    let find = |name: &str| {
        head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
        })
    };
    let body = if let Some(n) = find("content-length").and_then(|n| n.parse::<usize>().ok()) {
        let mut b = vec![0u8; n];
        r.read_exact(&mut b).unwrap();
        String::from_utf8_lossy(&b).into_owned()
    } else if find("transfer-encoding").is_some_and(|t| t.eq_ignore_ascii_case("chunked")) {
        let mut out = Vec::new();
        loop {
            let mut size = String::new();
            r.read_line(&mut size).unwrap();
            let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
            let mut b = vec![0u8; n + 2];
            r.read_exact(&mut b).unwrap();
            if n == 0 {
                break;
            }
            out.extend_from_slice(&b[..n]);
        }
        String::from_utf8_lossy(&out).into_owned()
    } else {
        let mut b = Vec::new();
        r.read_to_end(&mut b).unwrap();
        String::from_utf8_lossy(&b).into_owned()
    };
    let head = head.trim_end().to_string();
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    Answer { status, head, body }
}

/// chromedriver on a free port, and one headless Chromium session.
pub struct Browser {
    driver: Child,
    port: u16,
    session: String,
    _profile: tempfile::TempDir,
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Browser {
    pub fn start() -> Browser {
        let found = Command::new("chromedriver")
            .arg("--version")
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        assert!(
            found,
            "chromedriver is not installed: the page is tested in Debian's Chromium \
             (apt-get install chromium chromium-driver; .ci/run does it)"
        );
        let port = free_port();
        let driver = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let start = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "chromedriver never listened"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let profile = tempfile::tempdir().unwrap();
        let mut b = Browser {
            driver,
            port,
            session: String::new(),
            _profile: profile,
        };
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": "/usr/bin/chromium",
                "args": ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    "--disable-background-networking", "--disable-component-update", "--disable-sync",
                    "--no-first-run", "--window-size=1400,1300",
                    format!("--user-data-dir={}", b._profile.path().display())],
            }
        }}});
        let v = b.call("POST", "/session", Some(caps));
        b.session = v["sessionId"].as_str().expect("a session").to_string();
        b
    }

    pub fn call(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let host = format!("127.0.0.1:{}", self.port);
        let a = http(
            self.port,
            method,
            path,
            &[("Host", &host), ("Content-Type", "application/json")],
            &body,
        );
        let body = a.body;
        let v: Value = serde_json::from_str(&body)
            .unwrap_or_else(|e| panic!("chromedriver said ({e}): {body}"));
        assert!(
            v["value"].get("error").is_none(),
            "{method} {path}: {}",
            v["value"]
        );
        v["value"].clone()
    }

    pub fn go(&self, url: &str) {
        self.call(
            "POST",
            &format!("/session/{}/url", self.session),
            Some(json!({ "url": url })),
        );
    }

    pub fn js(&self, script: &str) -> Value {
        self.call(
            "POST",
            &format!("/session/{}/execute/sync", self.session),
            Some(json!({"script": script, "args": []})),
        )
    }

    pub fn js_async(&self, script: &str) -> Value {
        self.call(
            "POST",
            &format!("/session/{}/execute/async", self.session),
            Some(json!({"script": script, "args": []})),
        )
    }

    /// Wait (20 s at most) until `script` returns true.
    pub fn until(&self, what: &str, script: &str) {
        self.until_within(what, script, Duration::from_secs(20));
    }

    /// Wait (`hang` at most: a guard against a hang) until `script` returns true.
    pub fn until_within(&self, what: &str, script: &str, hang: Duration) {
        let start = Instant::now();
        while self.js(script) != Value::Bool(true) {
            assert!(
                start.elapsed() < hang,
                "never saw {what}; the page says: {}",
                self.js("return document.body.innerText")
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Make the page's viewport exactly `width`×`height` CSS pixels at one device pixel
    /// each (the window's own frame would otherwise take an unknown part of its size): a
    /// screenshot is then exactly that big.
    pub fn viewport(&self, width: u32, height: u32) {
        self.call(
            "POST",
            &format!("/session/{}/goog/cdp/execute", self.session),
            Some(
                json!({"cmd": "Emulation.setDeviceMetricsOverride", "params": {
                    "width": width, "height": height, "deviceScaleFactor": 1, "mobile": false,
                }}),
            ),
        );
    }

    /// A Chrome DevTools Protocol command on the page (emulated media, a script run
    /// before each document's own).
    pub fn cdp(&self, cmd: &str, params: Value) -> Value {
        self.call(
            "POST",
            &format!("/session/{}/goog/cdp/execute", self.session),
            Some(json!({"cmd": cmd, "params": params})),
        )
    }

    /// A PNG of the viewport.
    pub fn screenshot(&self) -> Vec<u8> {
        base64_decode(&self.screenshot_base64())
    }

    /// A PNG of the viewport, in base64 (as a `data:` URL carries it).
    pub fn screenshot_base64(&self) -> String {
        let v = self.call(
            "GET",
            &format!("/session/{}/screenshot", self.session),
            None,
        );
        v.as_str().expect("a screenshot").to_string()
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let _ = http(
                self.port,
                "DELETE",
                &format!("/session/{}", self.session),
                &[("Host", &format!("127.0.0.1:{}", self.port))],
                "",
            );
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

pub fn base64_decode(s: &str) -> Vec<u8> {
    let val = |c: u8| -> u32 {
        match c {
            b'A'..=b'Z' => (c - b'A') as u32,
            b'a'..=b'z' => (c - b'a' + 26) as u32,
            b'0'..=b'9' => (c - b'0' + 52) as u32,
            b'+' => 62,
            b'/' => 63,
            _ => 0,
        }
    };
    let bytes: Vec<u8> = s.bytes().filter(|c| !c.is_ascii_whitespace()).collect();
    let mut out = Vec::with_capacity(bytes.len() * 3 / 4);
    for chunk in bytes.chunks(4) {
        let pad = chunk.iter().filter(|&&c| c == b'=').count();
        let n = chunk.iter().fold(0u32, |acc, &c| {
            (acc << 6) | if c == b'=' { 0 } else { val(c) }
        });
        let n = n << (6 * (4 - chunk.len()));
        let b = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        out.extend_from_slice(&b[..3 - pad]);
    }
    out
}
