#!/usr/bin/env node
// The plugin's package.json and package-lock.json, generated from packed
// platform tarballs (scripts/npm-pack.sh), never written by hand.
//
//   node scripts/npm-lock.mjs TARBALL_DIR OUT_DIR [--all] [--check] [--registry URL]
//
// Every localagents-cli-<platform>-<version>.tgz in TARBALL_DIR at
// Cargo.toml's version becomes an optional dependency of the plugin
// (OUT_DIR/package.json, private) and a lock entry (OUT_DIR/package-lock.json)
// with its os/cpu, its `resolved` URL on the registry (default
// https://registry.npmjs.org, where `npm publish` puts it) and its
// `integrity`, the sha512 of the tarball's bytes. `npm ci` refuses a
// download whose bytes do not match.
//   --all    all four platforms must be there (a release)
//   --check  write nothing: exit 1 unless OUT_DIR's files are exactly what
//            these tarballs give (the release checks the tarballs it
//            publishes against the committed lockfile this way)
//
//   node scripts/npm-lock.mjs --package-json OUT_DIR
//
// writes only OUT_DIR/package.json, for all four platforms: the committed
// one, which needs no tarball (the lockfile comes with a release).
import { createHash } from "node:crypto";
import { readFileSync, readdirSync, writeFileSync, renameSync } from "node:fs";
import { join, dirname } from "node:path";
import { gunzipSync } from "node:zlib";
import { fileURLToPath } from "node:url";

const PLATFORMS = {
  "linux-x64": { os: "linux", cpu: "x64" },
  "linux-arm64": { os: "linux", cpu: "arm64" },
  "darwin-x64": { os: "darwin", cpu: "x64" },
  "darwin-arm64": { os: "darwin", cpu: "arm64" },
};
const MAX_TARBALL = 256 * 1024 * 1024;

function die(line) {
  process.stderr.write(`npm-lock: ${line}\n`);
  process.exit(1);
}

const args = process.argv.slice(2);
const flag = (f) => {
  const i = args.indexOf(f);
  if (i < 0) return false;
  args.splice(i, 1);
  return true;
};
const all = flag("--all");
const pkgOnly = flag("--package-json");
const check = flag("--check");
let registry = "https://registry.npmjs.org";
const ri = args.indexOf("--registry");
if (ri >= 0) {
  registry = (args[ri + 1] ?? die("--registry needs a URL")).replace(/\/+$/, "");
  args.splice(ri, 2);
}
if (!/^https?:\/\//.test(registry)) die(`--registry ${registry} is not an http(s) URL`);
if (pkgOnly && args.length === 1) args.unshift(null);
if (args.length !== 2) die("usage: node scripts/npm-lock.mjs TARBALL_DIR OUT_DIR [--all] [--check] [--registry URL]");
const [tarballs, out] = args;

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const cargo = readFileSync(join(root, "Cargo.toml"), "utf8");
const version = (cargo.match(/^version = "([^"]+)"$/m) ?? die("no version in Cargo.toml"))[1];

// The text of `package/package.json` inside a .tgz (ustar, gzip).
function packageJson(bytes, file) {
  const tar = gunzipSync(bytes, { maxOutputLength: MAX_TARBALL });
  for (let at = 0; at + 512 <= tar.length; ) {
    const header = tar.subarray(at, at + 512);
    if (header.every((b) => b === 0)) break;
    const field = (o, n) => header.subarray(o, o + n).toString("latin1").replace(/\0.*$/s, "");
    const name = (field(345, 155) ? field(345, 155) + "/" : "") + field(0, 100);
    const size = parseInt(field(124, 12).trim() || "0", 8);
    if (!Number.isSafeInteger(size) || size < 0) die(`${file}: a bad tar header`);
    if (name === "package/package.json") return JSON.parse(tar.subarray(at + 512, at + 512 + size).toString("utf8"));
    at += 512 + Math.ceil(size / 512) * 512;
  }
  die(`${file} has no package/package.json`);
}

const found = {};
for (const file of pkgOnly ? [] : readdirSync(tarballs).sort()) {
  const m = file.match(/^localagents-cli-(linux|darwin)-(x64|arm64)-(.+)\.tgz$/);
  if (!m) continue;
  const plat = `${m[1]}-${m[2]}`;
  if (m[3] !== version) die(`${file} is not Cargo.toml's version ${version}`);
  const bytes = readFileSync(join(tarballs, file));
  if (bytes.length > MAX_TARBALL) die(`${file} is over ${MAX_TARBALL} bytes`);
  const pj = packageJson(bytes, file);
  const name = `@localagents/cli-${plat}`;
  const want = PLATFORMS[plat];
  if (pj.name !== name || pj.version !== version || JSON.stringify(pj.os) !== JSON.stringify([want.os]) || JSON.stringify(pj.cpu) !== JSON.stringify([want.cpu])) {
    die(`${file}: its package.json says ${pj.name}@${pj.version} os ${pj.os} cpu ${pj.cpu}, not ${name}@${version} os ${want.os} cpu ${want.cpu}`);
  }
  found[plat] = {
    version,
    resolved: `${registry}/${name}/-/cli-${plat}-${version}.tgz`,
    integrity: "sha512-" + createHash("sha512").update(bytes).digest("base64"),
    cpu: [want.cpu],
    license: pj.license ?? "MIT",
    optional: true,
    os: [want.os],
  };
}
const plats = Object.keys(PLATFORMS).filter((p) => pkgOnly || p in found);
if (plats.length === 0) die(`no localagents-cli-<platform>-${version}.tgz in ${tarballs}`);
if (all) {
  const missing = Object.keys(PLATFORMS).filter((p) => !(p in found));
  if (missing.length) die(`--all: no tarball for ${missing.join(", ")} in ${tarballs}`);
}

const deps = Object.fromEntries(plats.map((p) => [`@localagents/cli-${p}`, version]));
const pkg = {
  name: "localagents-plugin",
  version,
  private: true,
  description: "The localagents Claude Code plugin's prebuilt binary: Claude Code's plugin install runs `npm ci --ignore-scripts` here, which takes only this platform's package, checked against package-lock.json. Generated by scripts/npm-lock.mjs.",
  license: "MIT",
  optionalDependencies: deps,
};
const lock = {
  name: pkg.name,
  version,
  lockfileVersion: 3,
  requires: true,
  packages: {
    "": { name: pkg.name, version, license: "MIT", optionalDependencies: deps },
    ...Object.fromEntries(plats.map((p) => [`node_modules/@localagents/cli-${p}`, found[p]])),
  },
};
const text = (v) => JSON.stringify(v, null, 2) + "\n";
const files = { "package.json": text(pkg), "package-lock.json": text(lock) };

if (pkgOnly) {
  writeFileSync(join(out, "package.json.tmp"), files["package.json"]);
  renameSync(join(out, "package.json.tmp"), join(out, "package.json"));
  process.stderr.write(`npm-lock: wrote ${join(out, "package.json")} (all platforms)\n`);
} else if (check) {
  let bad = false;
  for (const [f, want] of Object.entries(files)) {
    let have = "";
    try {
      have = readFileSync(join(out, f), "utf8");
    } catch {
      process.stderr.write(`npm-lock: ${join(out, f)} is missing\n`);
      bad = true;
      continue;
    }
    if (have !== want) {
      const got = JSON.parse(have);
      const gotEntries = f === "package-lock.json" ? got.packages ?? {} : {};
      for (const p of plats) {
        const e = gotEntries[`node_modules/@localagents/cli-${p}`];
        if (f === "package-lock.json" && e?.integrity !== found[p].integrity) {
          process.stderr.write(`npm-lock: localagents-cli-${p}-${version}.tgz has integrity ${found[p].integrity}, the committed lockfile ${e?.integrity ?? "no entry"}\n`);
        }
      }
      process.stderr.write(`npm-lock: ${join(out, f)} is not what these tarballs give\n`);
      bad = true;
    }
  }
  if (bad) process.exit(1);
  process.stderr.write(`npm-lock: ${out} matches the tarballs (${plats.join(", ")})\n`);
} else {
  for (const [f, t] of Object.entries(files)) {
    writeFileSync(join(out, f + ".tmp"), t);
    renameSync(join(out, f + ".tmp"), join(out, f));
  }
  process.stderr.write(`npm-lock: wrote ${join(out, "package.json")} and package-lock.json (${plats.join(", ")})\n`);
}
