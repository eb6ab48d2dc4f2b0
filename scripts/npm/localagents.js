#!/usr/bin/env node
// @localagents/cli: runs the localagents binary that npm installed for this
// platform (the optional dependency @localagents/cli-<os>-<cpu>), with the
// same arguments, stdio and exit status. `npx -y @localagents/cli serve`
// is the MCP server for a client outside Claude Code: stdout stays the
// binary's own (this script never writes there).
"use strict";

const { spawn } = require("node:child_process");
const os = require("node:os");

const PLATFORMS = {
  "linux x64": "linux-x64",
  "linux arm64": "linux-arm64",
  "darwin x64": "darwin-x64",
  "darwin arm64": "darwin-arm64",
};

function fail(line) {
  process.stderr.write(`localagents: ${line}\n`);
  process.exit(1);
}

// Windows: no binary can be built there (process groups, signals, /proc);
// the same sentence as src/lib.rs's compile_error!.
if (process.platform === "win32") {
  fail(
    "localagents runs on Linux and macOS only (process groups, signals, /proc): " +
      'on Windows, install and run it inside WSL2 (see docs/guide.md, section "Windows")',
  );
}
const key = PLATFORMS[`${process.platform} ${process.arch}`];
if (key === undefined) {
  fail(
    `no prebuilt binary for ${process.platform}-${process.arch}; build it from source: ` +
      "cargo install --locked --git https://github.com/localagents/localagents",
  );
}
const pkg = `@localagents/cli-${key}`;
let bin;
try {
  bin = require.resolve(`${pkg}/bin/localagents`);
} catch {
  fail(
    `the package ${pkg} is not installed (optional dependencies were left out: ` +
      "--omit=optional or --no-optional?); install it again with: npm install -g @localagents/cli",
  );
}

const child = spawn(bin, process.argv.slice(2), { stdio: "inherit" });
// Ctrl-C in a terminal reaches the whole process group, the binary too:
// this process only keeps living until the binary decides how to end
// (forwarding it would make one Ctrl-C two). SIGTERM and SIGHUP, sent to
// this process alone, are passed on.
process.on("SIGINT", () => {});
for (const sig of ["SIGTERM", "SIGHUP"]) {
  process.on(sig, () => child.kill(sig));
}
child.on("error", (e) => fail(`cannot run ${bin}: ${e.message}`));
child.on("exit", (code, signal) => {
  if (signal !== null) {
    // End the way the binary ended; where node will not die of that
    // signal, the shell's convention: 128 + its number.
    process.removeAllListeners(signal);
    try {
      process.kill(process.pid, signal);
    } catch {}
    process.exit(128 + (os.constants.signals[signal] ?? 0));
  }
  process.exit(code === null ? 1 : code);
});
