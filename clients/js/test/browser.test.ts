import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createServer, type Server } from "node:http";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { it } from "node:test";
import { fileURLToPath } from "node:url";
import { chromium, noChromium } from "./cdp.js";
import { freePort, startDaemon } from "./daemon.js";

// The built ESM file in a real browser (headless Chromium, Debian's
// package): a page served from an allowed origin writes an entity with
// the client and receives its events over the WebSocket (the token in
// the subprotocol); a page from a foreign origin is refused.

const built = join(dirname(fileURLToPath(import.meta.url)), "..", "src");

function page(addr: string, token: string): string {
  return `<!doctype html><meta charset="utf-8"><title>syncd</title>
<script type="module">
import { SyncdClient } from "/client/index.js";
const report = (body) => fetch("/report", { method: "POST", body: JSON.stringify(body) });
try {
  const c = new SyncdClient({ addr: ${JSON.stringify(addr)}, token: ${JSON.stringify(token)} });
  await c.setSession("alice", "alice.browser");
  const since = (await c.status()).lastEventSeq;
  const sub = c.subscribe({ since, type: "entity.changed" });
  const e = await c.create("note", { title: "from the browser" }, { id: "web1" });
  const seen = [];
  for await (const ev of sub) {
    if (ev.entityId === "web1") seen.push(ev.syncState);
    if (seen.includes("synced")) break;
  }
  sub.close();
  await report({ created: e.id, seen });
} catch (err) {
  await report({ error: String(err && err.name) + ": " + String(err && err.message) });
}
</script>`;
}

async function runPage(allowed: boolean): Promise<Record<string, unknown>> {
  const port = await freePort();
  const origin = `http://127.0.0.1:${port}`;
  const d = await startDaemon({ args: allowed ? ["--allowed-origin", origin] : [] });
  let resolveReport!: (v: Record<string, unknown>) => void;
  const reported = new Promise<Record<string, unknown>>((r) => (resolveReport = r));
  const server: Server = createServer((req, res) => {
    if (req.method === "GET" && req.url === "/") {
      res.writeHead(200, { "Content-Type": "text/html; charset=utf-8" });
      res.end(page(d.addr, d.token));
    } else if (req.method === "GET" && req.url?.startsWith("/client/")) {
      const name = req.url.slice("/client/".length);
      if (!/^[a-z]+\.js$/.test(name)) {
        res.writeHead(404).end();
        return;
      }
      res.writeHead(200, { "Content-Type": "text/javascript" });
      res.end(readFileSync(join(built, name)));
    } else if (req.method === "POST" && req.url === "/report") {
      let body = "";
      req.on("data", (b: Buffer) => (body += b.toString()));
      req.on("end", () => {
        res.end();
        resolveReport(JSON.parse(body) as Record<string, unknown>);
      });
    } else {
      res.writeHead(404).end();
    }
  });
  await new Promise<void>((r) => server.listen(port, "127.0.0.1", () => r()));
  const profile = mkdtempSync(join(tmpdir(), "syncd-js-chromium-"));
  const browser = spawn(chromium!, ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic",
    "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
    `--user-data-dir=${profile}`, "--remote-debugging-port=0", origin + "/"], { stdio: "ignore", detached: true });
  const timeout = setTimeout(() => resolveReport({ error: "no report from the page in 90 s" }), 90000);
  try {
    return await reported;
  } finally {
    clearTimeout(timeout);
    try {
      process.kill(-browser.pid!, "SIGKILL"); // the browser and its helpers
    } catch {
      // gone already
    }
    server.closeAllConnections();
    server.close();
    await d.stop();
    rmSync(profile, { recursive: true, force: true });
  }
}

it("runs in a browser on an allowed origin", { skip: noChromium }, async () => {
  const got = await runPage(true);
  assert.equal(got.error, undefined, String(got.error));
  assert.equal(got.created, "web1");
  assert.deepEqual(got.seen, ["pending", "synced"]);
});

it("is refused on a foreign origin", { skip: noChromium }, async () => {
  const got = await runPage(false);
  // The daemon answers 403 forbidden_origin without CORS headers: the
  // browser does not let the page read it, and to the page that is no
  // answer at all: a SyncdError daemon_unreachable around the browser's
  // "Failed to fetch".
  assert.match(String(got.error), /SyncdError: .*no answer from the daemon.*Failed to fetch/);
});
