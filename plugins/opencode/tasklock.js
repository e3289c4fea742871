// tasklock for OpenCode: every OpenCode session is a tasklock agent of its own.
// Written by `tasklock init` into .opencode/plugin/tasklock.js (and shipped as
// plugins/opencode/tasklock.js); it runs the `tasklock` binary found on PATH (or
// TASKLOCK_BIN) with the JSON Claude Code's hooks get, as `tasklock hook EVENT`.
//
// - A session is registered when it starts (or first acts), beats on every tool call and
//   when it goes idle, and is watched through the OpenCode process: its checkouts end
//   when the session is deleted, when OpenCode exits, or when its process dies.
// - Edits (edit, write, apply_patch) are judged before they run: an edit inside a path
//   another agent checked out is refused (the tool fails with tasklock's reason), and an
//   edit made is recorded for the commit guard and `tasklock stage`.
// - Shell commands of the session get OPENCODE_SESSION_ID and the session's own
//   TASKLOCK_SECRET, so `tasklock` run by the model acts as the session.
// - Where the session's server listens is recorded, so that a queued session that is
//   idle is woken when its turn comes (docs/wake.md).
import { spawn, spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";

const VERSION = "tasklock-opencode-plugin 1";
const EDIT_TOOLS = { edit: "Edit", write: "Write", multiedit: "MultiEdit" };
const PATCH_TOOLS = ["apply_patch", "patch"];
// Identities a shell command would otherwise take before the session's own.
const HIDDEN = [
  "TASKLOCK_AGENT",
  "CLAUDE_CODE_SESSION_ID",
  "CODEX_THREAD_ID",
  "GEMINI_SESSION_ID",
];

export const TasklockPlugin = async ({ directory, serverUrl }) => {
  const bin = process.env.TASKLOCK_BIN || "tasklock";
  const sessions = new Map();
  let server = "";
  try {
    server = String(serverUrl ?? "");
  } catch {
    server = "";
  }

  const env = (secret) => {
    const e = { ...process.env, TASKLOCK_SECRET: secret };
    for (const k of HIDDEN) delete e[k];
    return e;
  };
  const payload = (id, event, more) => ({
    session_id: id,
    cwd: directory,
    hook_event_name: event,
    opencode: { server_url: server, directory, plugin: VERSION },
    ...more,
  });
  // Run `tasklock hook EVENT` with the payload on stdin; never throws.
  const hook = (event, body, secret) =>
    new Promise((resolve) => {
      let child;
      try {
        child = spawn(bin, ["hook", event], {
          cwd: directory,
          env: env(secret),
          stdio: ["pipe", "pipe", "pipe"],
        });
      } catch (e) {
        resolve({ code: -1, out: "", err: String(e) });
        return;
      }
      let out = "";
      let err = "";
      child.stdout.on("data", (d) => (out += d));
      child.stderr.on("data", (d) => (err += d));
      child.on("error", (e) => resolve({ code: -1, out, err: String(e) }));
      child.on("close", (code) => {
        if (err.trim()) console.error(`tasklock hook ${event}: ${err.trim()}`);
        resolve({ code, out, err });
      });
      child.stdin.on("error", () => {});
      child.stdin.end(JSON.stringify(body));
    });
  const parse = (out) => {
    try {
      return JSON.parse(out);
    } catch {
      return null;
    }
  };
  const context = (r) => parse(r.out)?.hookSpecificOutput?.additionalContext ?? "";

  // The session's state, registered on first sight.
  const session = (id) => {
    let s = sessions.get(id);
    if (!s) {
      s = { secret: randomBytes(32).toString("hex"), context: "", ended: false };
      s.started = hook("session-start", payload(id, "SessionStart", {}), s.secret).then((r) => {
        s.context = context(r);
      });
      sessions.set(id, s);
    }
    return s;
  };
  const end = (id) => {
    const s = sessions.get(id);
    if (!s || s.ended) return;
    s.ended = true;
    return hook("session-end", payload(id, "SessionEnd", { reason: "deleted" }), s.secret);
  };
  // What an edit tool call edits, in the shape of Claude Code's (or Codex's) tool input.
  const edit = (tool, args) => {
    if (EDIT_TOOLS[tool] && typeof args?.filePath === "string") {
      return { tool_name: EDIT_TOOLS[tool], tool_input: { file_path: args.filePath } };
    }
    if (PATCH_TOOLS.includes(tool) && typeof args?.patchText === "string") {
      return { tool_name: "apply_patch", tool_input: { patch: args.patchText } };
    }
    return null;
  };

  // OpenCode ends without deleting its sessions: release them on the way out (a killed
  // OpenCode is seen by the watcher each session start begins).
  process.once("exit", () => {
    for (const [id, s] of sessions) {
      if (s.ended) continue;
      s.ended = true;
      try {
        spawnSync(bin, ["hook", "session-end"], {
          cwd: directory,
          env: env(s.secret),
          input: JSON.stringify(payload(id, "SessionEnd", { reason: "exit" })),
          timeout: 5000,
        });
      } catch {}
    }
  });

  return {
    event: async ({ event }) => {
      const id = event?.properties?.sessionID ?? event?.properties?.info?.id;
      if (typeof id !== "string") return;
      if (event.type === "session.created") {
        await session(id).started;
      } else if (event.type === "session.idle") {
        const s = session(id);
        await s.started;
        await hook("stop", payload(id, "Stop", {}), s.secret);
      } else if (event.type === "session.deleted") {
        await end(id);
      }
    },
    "tool.execute.before": async (input, output) => {
      const s = session(input.sessionID);
      await s.started;
      const e = edit(input.tool, output?.args);
      if (!e) return;
      const r = await hook("pre-tool-use", payload(input.sessionID, "PreToolUse", e), s.secret);
      const v = parse(r.out);
      const h = v?.hookSpecificOutput;
      if (h?.permissionDecision === "deny") throw new Error(h.permissionDecisionReason);
      if (v?.decision === "block") throw new Error(v.reason);
    },
    "tool.execute.after": async (input, output) => {
      const s = session(input.sessionID);
      await s.started;
      const e = edit(input.tool, input.args) ?? { tool_name: input.tool, tool_input: {} };
      const r = await hook("post-tool-use", payload(input.sessionID, "PostToolUse", e), s.secret);
      const more = context(r);
      if (more && output && typeof output.output === "string") {
        output.output += `\n\n${more}`;
      }
    },
    "shell.env": async (input, output) => {
      if (typeof input?.sessionID !== "string") return;
      const s = session(input.sessionID);
      await s.started;
      for (const k of HIDDEN) output.env[k] = "";
      output.env.OPENCODE_SESSION_ID = input.sessionID;
      output.env.TASKLOCK_SECRET = s.secret;
    },
    "experimental.chat.system.transform": async (input, output) => {
      const s = typeof input?.sessionID === "string" ? sessions.get(input.sessionID) : null;
      if (!s) return;
      await s.started;
      if (s.context && Array.isArray(output?.system)) output.system.push(s.context);
    },
  };
};
