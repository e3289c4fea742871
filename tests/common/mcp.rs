//! `tasklock mcp` driven as an MCP client drives it, for the tests that call its tools.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::process::Stdio;

use serde_json::{Value, json};

use super::{Env, base_cmd, use_store};

/// `tasklock --dir D mcp` driven over its stdin and stdout, newline-delimited JSON-RPC.
pub struct Mcp {
    child: std::process::Child,
    out: BufReader<std::process::ChildStdout>,
    next_id: u64,
}

impl Mcp {
    pub fn start(e: &Env, env: &[(&str, &str)]) -> Mcp {
        let mut cmd = base_cmd(&e.now);
        use_store(&mut cmd, &e.dir());
        cmd.envs(env.iter().copied())
            .arg("--dir")
            .arg(e.dir())
            .arg("mcp")
            .current_dir(e.tmp.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut child = cmd.spawn().unwrap();
        let out = BufReader::new(child.stdout.take().unwrap());
        let mut mcp = Mcp {
            child,
            out,
            next_id: 1,
        };
        let init = mcp.request(
            "initialize",
            json!({
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "dash-test", "version": "1"},
            }),
        );
        assert_eq!(init["serverInfo"]["name"], "tasklock", "{init}");
        mcp.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        mcp
    }

    pub fn send(&mut self, v: &Value) {
        let stdin = self.child.stdin.as_mut().unwrap();
        writeln!(stdin, "{v}").unwrap();
        stdin.flush().unwrap();
    }

    /// The result of one request (notifications in between are skipped).
    pub fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        loop {
            let mut line = String::new();
            assert!(self.out.read_line(&mut line).unwrap() > 0, "server closed");
            let v: Value = serde_json::from_str(&line).unwrap();
            if v["id"] == id {
                assert!(v["error"].is_null(), "{v}");
                return v["result"].clone();
            }
        }
    }

    pub fn call(&mut self, tool: &str, args: Value) -> Value {
        self.request("tools/call", json!({"name": tool, "arguments": args}))
    }

    pub fn ok(&mut self, tool: &str, args: Value) -> Value {
        let r = self.call(tool, args.clone());
        assert_ne!(r["isError"], true, "{tool} {args}: {r}");
        r
    }

    pub fn close(mut self) {
        drop(self.child.stdin.take());
        self.child.wait().unwrap();
    }
}
