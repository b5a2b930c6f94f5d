import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtempSync } from "node:fs";
import { createServer, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { describe, it } from "node:test";
import { fileURLToPath, pathToFileURL } from "node:url";
import { SyncdClient, SyncdError } from "../src/index.js";
import { unixFetch } from "../src/node.js";
import { freePort, startDaemon } from "./daemon.js";

function isUnreachable(err: unknown): boolean {
  return err instanceof SyncdError && err.code === "daemon_unreachable" && err.status === 0 && err.cause !== undefined;
}

describe("a daemon that is down", () => {
  it("is a SyncdError with code daemon_unreachable, not a TypeError", async () => {
    const c = new SyncdClient({ addr: `127.0.0.1:${await freePort()}`, token: "t", retries: 2, retryDelayMs: 1 });
    await assert.rejects(c.status(), isUnreachable);
    await assert.rejects(c.create("note", {}), isUnreachable);
    await assert.rejects(c.resolve("note", "n1", "server"), isUnreachable);
    const path = join(mkdtempSync(join(tmpdir(), "syncd-js-nosock-")), "syncd.sock");
    const sock = new SyncdClient({ socketPath: path, fetch: unixFetch(path), token: "t", retries: 0 });
    await assert.rejects(sock.status(), isUnreachable);
  });

  it("sends a request that never left again, whatever it is, until the daemon is back", async () => {
    const first = await startDaemon();
    const { dataDir, port, token } = first;
    await first.stop();
    // PUT /v1/session has no idempotency key; a refused connection means
    // it was never sent, so sending it again is safe.
    const c = new SyncdClient({ addr: first.addr, token, retries: 10, retryDelayMs: 50 });
    const signingIn = c.setSession("alice", "alice.dev");
    const second = await startDaemon({ dataDir, port });
    await signingIn;
    assert.equal((await c.status()).accountId, "alice");
    await second.stop();
  });

  it("does not send a keyless write again once it may have been received", async () => {
    // A listener that takes each connection and drops it when the request
    // arrives: the request left, the answer never came.
    const conns: Socket[] = [];
    const srv = createServer((s) => {
      conns.push(s);
      s.once("data", () => s.destroy());
    });
    const port = await freePort();
    await new Promise<void>((r) => srv.listen(port, "127.0.0.1", r));
    try {
      const c = new SyncdClient({ addr: `127.0.0.1:${port}`, token: "t", retries: 3, retryDelayMs: 1 });
      await assert.rejects(c.retry("op-1"), isUnreachable);
      assert.equal(conns.length, 1, "a POST without a key is sent once");
      await assert.rejects(c.update("note", "n1", { a: 1 }), isUnreachable);
      assert.equal(conns.length, 1 + 4, "a write with its key is sent again: 1 + 3 retries");
      await assert.rejects(c.status(), isUnreachable);
      assert.equal(conns.length, 5 + 4, "a read is sent again");
    } finally {
      await new Promise<void>((r) => srv.close(() => r()));
    }
  });
});

describe("the global WebSocket", () => {
  it("is used when there is one (Node 22+; Node 20 with --experimental-websocket), token in the subprotocol", async () => {
    const d = await startDaemon();
    const index = pathToFileURL(join(dirname(fileURLToPath(import.meta.url)), "..", "src", "index.js")).href;
    const script = `
      import { SyncdClient } from ${JSON.stringify(index)};
      if (typeof WebSocket !== "function") throw new Error("no global WebSocket");
      const c = new SyncdClient({ addr: ${JSON.stringify(d.addr)}, token: ${JSON.stringify(d.token)} });
      await c.setSession("alice", "alice.dev");
      const sub = c.subscribe({ since: (await c.status()).lastEventSeq, type: "entity.changed" });
      await c.create("note", { title: "over the global WebSocket" }, { id: "g1" });
      for await (const e of sub) {
        if (e.type === "entity.changed") { console.log(JSON.stringify({ id: e.entityId, state: e.syncState })); break; }
      }
      sub.close();
    `;
    const major = Number(process.versions.node.split(".")[0]);
    const flags = major < 22 ? ["--experimental-websocket", "--no-warnings"] : [];
    try {
      const out = await new Promise<string>((res, rej) =>
        execFile(process.execPath, [...flags, "--input-type=module", "-e", script], (err, stdout, stderr) =>
          err ? rej(new Error(stderr || String(err))) : res(stdout)),
      );
      assert.deepEqual(JSON.parse(out.trim()), { id: "g1", state: "pending" });
    } finally {
      await d.stop();
    }
  });
});
