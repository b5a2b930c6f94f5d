// The package as an app developer gets it: `npm run pack:tarball`, the
// README's one command, in a clean copy of clients/js (the files git has:
// no node_modules, no dist), the tarball installed into a
// scratch project with ws and the lockfile's TypeScript, a script
// type-checked with strict tsc against the installed declarations, then
// run against a live daemon built from this repository; then react
// installed beside it and a component using the hooks subpath
// (@syncd/client/react) type-checked and loaded.
//
// Run: npm run test:pack (from clients/js; needs go and the npm registry).

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { it } from "node:test";
import { fileURLToPath } from "node:url";
import { startDaemon } from "../dist/test/daemon.js";

const pkgDir = join(dirname(fileURLToPath(import.meta.url)), "..");
const lock = JSON.parse(readFileSync(join(pkgDir, "package-lock.json"), "utf8")).packages;
const pinned = (name) => `${name}@${lock[`node_modules/${name}`].version}`;

const app = `
import { SyncdError, type EntityChangedEvent } from "@syncd/client";
import { connect } from "@syncd/client/node";
import WebSocket from "ws";

interface Note { title: string; done?: boolean }

const c = await connect<{ note: Note }>({ WebSocket });
await c.setSession("alice", "alice.dev");
const sub = c.subscribe({ since: (await c.status()).lastEventSeq, type: "entity.changed" });
const live = c.live("note", { orderBy: "title" });
const n = await c.create("note", { title: "from the tarball" }, { id: "p1" });
const seen: EntityChangedEvent[] = [];
for await (const e of sub) {
  if (e.type !== "entity.changed") continue;
  seen.push(e);
  if (e.syncState === "synced") break;
}
let listed = "";
for await (const r of live) {
  const row = r.items.find((e) => e.id === "p1");
  if (row?.syncState === "synced") { listed = row.data?.title ?? ""; break; }
}
let code = "";
try {
  await c.get("note", "missing");
} catch (err) {
  if (err instanceof SyncdError) code = err.code;
}
console.log(JSON.stringify({ created: n.data?.title, states: seen.map((e) => e.syncState), listed, code }));
`;

// The hooks, once react is installed beside the package (an optional
// peer): typed through the client's schema map, in JSX.
const hooks = `
import { createClient } from "@syncd/client";
import { SyncdProvider, useConflicts, useEntity, useList, useSyncStatus } from "@syncd/client/react";

interface Note { title: string; done?: boolean }
const client = createClient<{ note: Note }>({ token: "t" });

function Notes() {
  const { items, loading } = useList(client, "note", { orderBy: "title", filter: { done: false } });
  const { entity } = useEntity(client, "note", "n1");
  const conflicts = useConflicts(client, "note");
  const { state, counts } = useSyncStatus();
  if (loading) return <p>loading</p>;
  return (
    <ul data-state={state} data-pending={counts.pending} data-conflicts={conflicts.items.length} data-first={entity?.data?.title}>
      {items.map((e) => <li key={e.id}>{e.data?.title} ({e.syncState})</li>)}
    </ul>
  );
}

export const app = <SyncdProvider client={client}><Notes /></SyncdProvider>;
console.log(JSON.stringify({ hooks: [useList, useEntity, useConflicts, useSyncStatus].map((f) => typeof f), provider: typeof SyncdProvider }));
`;

it("packs, installs into a scratch project, type-checks and runs against a live daemon", async () => {
  const scratch = mkdtempSync(join(tmpdir(), "syncd-js-pack-"));
  const clone = mkdtempSync(join(tmpdir(), "syncd-js-clone-"));
  const d = await startDaemon();
  try {
    // A clean clone's clients/js: what git has (tracked, and new files not
    // ignored), without node_modules or dist; then the one documented command.
    const files = execFileSync("git", ["ls-files", "-z", "--cached", "--others", "--exclude-standard", "."], { cwd: pkgDir, encoding: "utf8" });
    for (const f of files.split("\0").filter(Boolean)) {
      if (!existsSync(join(pkgDir, f))) continue; // deleted, not yet committed
      mkdirSync(dirname(join(clone, f)), { recursive: true });
      copyFileSync(join(pkgDir, f), join(clone, f));
    }
    assert.ok(!existsSync(join(clone, "node_modules")) && !existsSync(join(clone, "dist")), "the copy is clean");
    execFileSync("npm", ["run", "pack:tarball", "--loglevel=error"], { cwd: clone, stdio: ["ignore", "ignore", "inherit"] });
    const { version } = JSON.parse(readFileSync(join(pkgDir, "package.json"), "utf8"));
    const tgz = `syncd-client-${version}.tgz`;
    assert.deepEqual(readdirSync(clone).filter((f) => f.endsWith(".tgz")), [tgz], "npm run pack:tarball wrote the tarball the README names");
    copyFileSync(join(clone, tgz), join(scratch, tgz));
    const listing = execFileSync("tar", ["-tzf", join(scratch, tgz)], { encoding: "utf8" });
    assert.match(listing, /package\/dist\/src\/index\.d\.ts/);
    assert.match(listing, /package\/dist\/src\/react\.js/);
    assert.match(listing, /package\/dist\/src\/react\.d\.ts/);
    assert.doesNotMatch(listing, /package\/dist\/test\//, "the tests stay out of the package");

    writeFileSync(join(scratch, "package.json"), JSON.stringify({ name: "scratch-app", private: true, type: "module" }));
    execFileSync("npm", ["install", "--no-audit", "--no-fund", "--loglevel=error", join(scratch, tgz),
      pinned("ws"), pinned("typescript"), pinned("@types/ws"), pinned("@types/node")], { cwd: scratch, stdio: "inherit" });
    writeFileSync(join(scratch, "app.ts"), app);
    writeFileSync(join(scratch, "tsconfig.json"), JSON.stringify({
      compilerOptions: { target: "ES2022", module: "NodeNext", moduleResolution: "NodeNext", strict: true, outDir: "out", types: ["node"] },
      files: ["app.ts"],
    }));
    // Strict tsc against the installed package's declarations (no skipLibCheck).
    execFileSync(process.execPath, [join(scratch, "node_modules", "typescript", "bin", "tsc"), "-p", "."], { cwd: scratch, stdio: "inherit" });
    const out = execFileSync(process.execPath, [join(scratch, "out", "app.js")], {
      cwd: scratch,
      encoding: "utf8",
      env: { ...process.env, SYNCD_DATA_DIR: d.dataDir, SYNCD_ADDR: d.addr },
    });
    assert.deepEqual(JSON.parse(out.trim()), { created: "from the tarball", states: ["pending", "synced"], listed: "from the tarball", code: "not_found" });

    // The main entry above compiled and ran without react; now the hooks
    // subpath, with react and its types installed as an app would.
    execFileSync("npm", ["install", "--no-audit", "--no-fund", "--loglevel=error", pinned("react"), pinned("@types/react")], { cwd: scratch, stdio: "inherit" });
    writeFileSync(join(scratch, "hooks.tsx"), hooks);
    writeFileSync(join(scratch, "tsconfig.hooks.json"), JSON.stringify({
      compilerOptions: { target: "ES2022", module: "NodeNext", moduleResolution: "NodeNext", strict: true, jsx: "react-jsx", outDir: "out", types: ["node"] },
      files: ["hooks.tsx"],
    }));
    execFileSync(process.execPath, [join(scratch, "node_modules", "typescript", "bin", "tsc"), "-p", "tsconfig.hooks.json"], { cwd: scratch, stdio: "inherit" });
    const hooksOut = execFileSync(process.execPath, [join(scratch, "out", "hooks.js")], { cwd: scratch, encoding: "utf8" });
    assert.deepEqual(JSON.parse(hooksOut.trim()), { hooks: ["function", "function", "function", "function"], provider: "function" });
  } finally {
    await d.stop();
    rmSync(scratch, { recursive: true, force: true });
    rmSync(clone, { recursive: true, force: true });
  }
});
