import assert from "node:assert/strict";
import { chmodSync, mkdtempSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import WebSocket from "ws";
import { SyncdError } from "../src/index.js";
import { connect, locate } from "../src/node.js";
import { freePort, startDaemon, type Daemon } from "./daemon.js";

const WS = WebSocket; // the ws package, no cast: it fits WebSocketConstructor

describe("over the daemon's Unix socket", { skip: process.platform === "win32" && "no Unix socket listener on Windows" }, () => {
  let d: Daemon;
  let env: Record<string, string | undefined>;
  before(async () => {
    // A space in the path, as macOS's Application Support has.
    d = await startDaemon({ dataDir: mkdtempSync(join(tmpdir(), "syncd js ")) });
    // The listen address points nowhere: only the socket can answer.
    env = { HOME: d.dataDir, SYNCD_DATA_DIR: d.dataDir, SYNCD_LISTEN: `127.0.0.1:${await freePort()}` };
  });
  after(async () => {
    await d.stop();
  });

  it("connect() finds the socket and reads, writes and streams over it", async () => {
    const l = await locate(env);
    assert.equal(l.socket, join(d.dataDir, "syncd.sock"));
    assert.equal((await locate({ ...env, SYNCD_ADDR: d.addr })).socket, undefined, "an address given means TCP");
    const c = await connect({ WebSocket: WS }, env);
    await c.setSession("alice", "alice.dev");
    const sub = c.subscribe({ entityType: "note" });
    const it = sub[Symbol.asyncIterator]();
    const n = await c.create("note", { title: "over the socket" }, { id: "s1" });
    assert.equal(n.syncState, "pending");
    const first = await it.next();
    assert.equal(first.value?.entityId, "s1");
    sub.close();

    const made = await c.addApp("notes", ["note"]);
    const app = await connect({ WebSocket: WS, token: made.token }, env);
    assert.equal((await app.get("note", "s1")).id, "s1");
    await assert.rejects(app.list("task"), (err: unknown) => err instanceof SyncdError && err.code === "type_not_granted");
    const wrong = await connect({ token: "syncd_app_" + "0".repeat(64) }, env);
    await assert.rejects(wrong.status(), (err: unknown) => err instanceof SyncdError && err.code === "unauthorized");
  });

  it("does not send the token to a socket in a directory others may enter", async () => {
    const dir = mkdtempSync(join(tmpdir(), "syncd-js-open-"));
    chmodSync(dir, 0o755);
    const path = join(dir, "syncd.sock");
    const srv = createServer();
    await new Promise<void>((res) => srv.listen(path, res));
    try {
      await assert.rejects(locate({ ...env, SYNCD_SOCKET: path }), /not this user's alone/);
    } finally {
      await new Promise<void>((res) => srv.close(() => res()));
    }
  });
});
