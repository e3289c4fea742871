// After `npm install`: put this platform's prebuilt tasklock (and tasklock-mcp and tasklock-view, which
// `tasklock mcp` runs from beside it) in place of the bin/tasklock script, so that npm's
// link runs the binary directly. Nothing is downloaded: the binary comes from the
// platform package npm installed as an optional dependency. If anything here fails, the
// script stays and runs the binary itself.
"use strict";
const fs = require("fs");
const path = require("path");

const PLATFORMS = {
  "linux-x64": "@tasklock/linux-x64",
  "linux-arm64": "@tasklock/linux-arm64",
  "darwin-arm64": "@tasklock/darwin-arm64",
  "darwin-x64": "@tasklock/darwin-x64",
};

/** The installed binary `name` of this platform's package, or null. */
function nativeBinary(name = "tasklock") {
  const pkg = PLATFORMS[`${process.platform}-${process.arch}`];
  if (!pkg) return null;
  try {
    return require.resolve(`${pkg}/bin/${name}`);
  } catch {
    return null;
  }
}

function install() {
  const bin = nativeBinary();
  if (!bin) return;
  const dir = path.join(__dirname, "bin");
  for (const name of ["tasklock", "tasklock-mcp", "tasklock-view"]) {
    const from = name === "tasklock" ? bin : nativeBinary(name);
    if (!from) continue;
    const to = path.join(dir, name);
    const tmp = `${to}.${process.pid}.tmp`;
    fs.copyFileSync(from, tmp);
    fs.chmodSync(tmp, 0o755);
    fs.renameSync(tmp, to);
  }
}

module.exports = { nativeBinary };

if (require.main === module) {
  try {
    install();
  } catch (e) {
    console.warn(`tasklock: kept the Node launcher (${e.message})`);
  }
}
