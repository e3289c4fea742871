// The last resort of bin/tasklock: when the platform package is not where the sh launcher
// looks (a package manager with another layout), Node resolves it and runs it.
"use strict";
const { spawnSync } = require("child_process");
const { nativeBinary } = require("./install.js");

const bin = nativeBinary();
if (!bin) {
  console.error(
    `tasklock: no prebuilt binary for ${process.platform}-${process.arch} was installed ` +
      `(the package @tasklock/${process.platform}-${process.arch}). Supported: linux-x64, ` +
      "linux-arm64, darwin-arm64, darwin-x64; elsewhere install from source (cargo install tasklock)."
  );
  process.exit(1);
}
const r = spawnSync(bin, process.argv.slice(2), { stdio: "inherit" });
if (r.error) {
  console.error(`tasklock: cannot run ${bin}: ${r.error.message}`);
  process.exit(1);
}
if (r.signal) {
  process.kill(process.pid, r.signal);
}
process.exit(r.status === null ? 1 : r.status);
