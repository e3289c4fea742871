// A scripted MCP client on the official TypeScript SDK (@modelcontextprotocol/sdk), for
// tests/e2e_mcp.rs. Usage: node mcp_client.mjs TASKLOCK PROJECT
// Two clients (two `tasklock mcp` processes, two agents) play a checkout, a conflict, a
// queue and a handover; everything seen is printed as one JSON object on stdout.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { LoggingMessageNotificationSchema } from "@modelcontextprotocol/sdk/types.js";

const [tasklock, project] = process.argv.slice(2);
const out = { notifications: { a: [], b: [] } };

async function connect(who, name) {
  const transport = new StdioClientTransport({
    command: tasklock,
    args: ["mcp"],
    cwd: project,
    stderr: "inherit",
    env: { PATH: process.env.PATH, HOME: process.env.HOME ?? "/tmp" },
  });
  const client = new Client({ name, version: "1.0.0" });
  client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => {
    out.notifications[who].push(n.params);
  });
  await client.connect(transport);
  return { client, transport };
}

const call = (c, name, args) => c.client.callTool({ name, arguments: args });

async function until(what, ok, ms = 15000) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (ok()) return true;
    await new Promise((r) => setTimeout(r, 100));
  }
  out.timeouts = [...(out.timeouts ?? []), what];
  return false;
}

const a = await connect("a", "agent-a-client");
out.server = a.client.getServerVersion();
out.capabilities = a.client.getServerCapabilities();
out.tools = (await a.client.listTools()).tools;
out.checkout_a = await call(a, "checkout", { key: "task-1", reason: "e2e" });

const b = await connect("b", "agent-b-client");
out.checkout_b = await call(b, "checkout", { key: "task-1" });
out.queue_b = await call(b, "checkout", { key: "task-1", queue: true });
out.bad_args = await call(b, "checkout", { key: "task-1", wait_seconds: 600 });
out.release_b = await call(b, "release", { keys: ["task-1"] });

out.release_a = await call(a, "release", { keys: ["task-1"], note: "half done" });
await until("handover notification to b", () => out.notifications.b.length > 0);
out.inbox_b = await call(b, "inbox", {});
out.checkout_b_after = await call(b, "checkout", { key: "task-1" });
out.status = await call(a, "status", { key: "task-1" });
// Paths: A locks a tree; B's key with a file inside it is refused, naming A.
out.paths_a = await call(a, "checkout", { paths: ["src/a"] });
out.paths_b = await call(b, "checkout", { key: "task-2", paths: ["src/a/x.rs"] });
// A hands task-3 to B: B holds it under a new token, is told, and releases it as its own.
out.checkout_a3 = await call(a, "checkout", { key: "task-3" });
const idB = out.checkout_b_after?._meta?.["tasklock/json"]?.checkout?.agent?.id;
out.give_nobody = await call(a, "give", { key: "task-3", to: "nobody-at-all" });
const seenB = out.notifications.b.length;
out.give_a = await call(a, "give", { key: "task-3", to: idB });
await until("given notification to b", () => out.notifications.b.length > seenB);
out.status_given = await call(b, "status", { key: "task-3" });
out.release_given = await call(b, "release", { keys: ["task-3"] });
out.client_pid = process.pid;

await a.client.close();
await b.client.close();
console.log(JSON.stringify(out));
