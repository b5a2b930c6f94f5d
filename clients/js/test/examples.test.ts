import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import WebSocket from "ws";
import { SyncdClient } from "../src/index.js";
import { noChromium, openPage } from "./cdp.js";
import { freePort, startDaemon } from "./daemon.js";

// The example app (examples/) run as a developer runs it, against real
// daemons: the Node script as a child process, the renderer page in
// headless Chromium, served by the example's own server.

const examples = join(dirname(fileURLToPath(import.meta.url)), "..", "examples");

/** A child process whose output is read line by line, waiting for lines that match. */
class Proc {
  out = "";
  private waiters: { re: RegExp; from: number; res: (m: RegExpExecArray) => void }[] = [];
  readonly exited: Promise<number | null>;
  constructor(readonly p: ChildProcess) {
    p.stdout!.on("data", (b: Buffer) => {
      this.out += b.toString();
      if (process.env.SYNCD_JS_DEBUG) process.stderr.write(b);
      this.check();
    });
    p.stderr!.on("data", (b: Buffer) => (this.out += b.toString()));
    this.exited = new Promise((res) => p.on("exit", (code) => res(code)));
  }
  private check(): void {
    this.waiters = this.waiters.filter((w) => {
      const re = new RegExp(w.re.source, w.re.flags.includes("m") ? w.re.flags : w.re.flags + "m");
      const m = re.exec(this.out.slice(w.from));
      if (!m) return true;
      w.res(m);
      return false;
    });
  }
  /** The first match of re in the output after `from` (default: all of it). */
  wait(re: RegExp, from = 0): Promise<RegExpExecArray> {
    return new Promise((res) => {
      this.waiters.push({ re, from, res });
      this.check();
    });
  }
}

function run(args: string[], env: Record<string, string>): Proc {
  return new Proc(spawn(process.execPath, args, { env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"] }));
}

describe("the example app", () => {
  it("the Node script lists, adds, edits and follows the sync state", { timeout: 60000 }, async () => {
    const d = await startDaemon();
    const admin = new SyncdClient<{ note: { title: string } }>({ addr: d.addr, token: d.token, WebSocket });
    const env = { SYNCD_DATA_DIR: d.dataDir, SYNCD_ADDR: d.addr };
    const script = join(examples, "notes.js");
    let watch: Proc | undefined;
    try {
      // Not signed in: it says so by the error's code.
      const signedOut = run([script, "add", "Buy milk"], env);
      assert.equal(await signedOut.exited, 1);
      assert.match(signedOut.out, /^notes: no_session: /m);

      // add, signing the user in first: it writes, then follows the note
      // until it is synced, and exits.
      const add = run([script, "--account", "alice", "--access-token", "alice.1", "add", "Buy milk"], env);
      const id = (await add.wait(/^added (\S+)$/))[1]!;
      await add.wait(new RegExp(`^  ${id}  (pending|synced) +Buy milk$`));
      await add.wait(new RegExp(`^${id} is synced$`));
      assert.equal(await add.exited, 0, add.out);
      assert.equal((await admin.status()).accountId, "alice");

      // edit, the same.
      const edit = run([script, "edit", id, "Buy oat milk"], env);
      await edit.wait(new RegExp(`^${id} is synced$`));
      assert.equal(await edit.exited, 0, edit.out);
      assert.match(edit.out, new RegExp(`^  ${id}  synced +Buy oat milk$`, "m"));

      // Following: another app's write shows, pending then synced; a
      // SIGKILL of the daemon shows, and the list goes on after the
      // restart; Ctrl-C ends it, and node exits by itself (nothing left open).
      watch = run([script], env);
      await watch.wait(new RegExp(`^  ${id}  synced +Buy oat milk$`));
      await watch.wait(/^sync: online, 0 to send, 0 failed$/);
      const mark = watch.out.length;
      await admin.create("note", { title: "Call Bob" }, { id: "bob" });
      await watch.wait(/^  bob  (pending|synced) +Call Bob$/, mark);
      await watch.wait(/^  bob  synced +Call Bob$/, mark);
      await d.kill();
      await watch.wait(/^sync: the daemon is not answering/, mark);
      const restarted = await startDaemon({ dataDir: d.dataDir, port: d.port });
      Object.assign(d, restarted);
      const mark2 = watch.out.length;
      await watch.wait(/^sync: online/, mark2);
      await admin.update("note", "bob", { title: "Call Bob back" });
      await watch.wait(/^  bob  synced +Call Bob back$/, mark2);
      watch.p.kill("SIGINT");
      assert.equal(await watch.exited, 0, watch.out);
      watch = undefined;
    } finally {
      watch?.p.kill("SIGKILL");
      await d.stop();
    }
  });

  it("the renderer page lists, adds, edits and shows sync state live in Chromium", { skip: noChromium, timeout: 120000 }, async () => {
    const port = await freePort();
    const origin = `http://127.0.0.1:${port}`;
    let d = await startDaemon({ args: ["--allowed-origin", origin] });
    const admin = new SyncdClient<{ note: { title: string } }>({ addr: d.addr, token: d.token, WebSocket });
    await admin.setSession("alice", "alice.dev");
    // The page's own token, scoped to notes (syncd apps add notes --types note).
    const app = await admin.addApp("notes", ["note"]);
    await admin.create("note", { title: "Buy milk" }, { id: "milk" });
    const serve = run([join(examples, "serve.js"), "--addr", d.addr, "--token", app.token!, "--port", String(port)], {});
    let page: Awaited<ReturnType<typeof openPage>> | undefined;
    try {
      await serve.wait(/^serving the notes page on /);
      page = await openPage(origin + "/");
      const row = (id: string) => `() => { const li = document.querySelector('#notes li[data-id="${id}"]'); return li && li.dataset.state + " " + li.querySelector(".title").textContent; }`;
      const status = `() => document.querySelector("#status").dataset.state`;

      // The list and the daemon's state.
      assert.equal(await page.waitFor(`() => (${row("milk")})() === "synced Buy milk" && (${status})() === "online"`), true);

      // Add through the form: the new note shows, then synced.
      await page.evaluate(`document.querySelector("#new-title").focus()`);
      await page.type("Call Bob");
      await page.evaluate(`document.querySelector("#add button").click()`);
      const added = await page.waitFor<string>(`() => [...document.querySelectorAll("#notes li")].find((li) => li.textContent.startsWith("Call Bob"))?.dataset.id`);
      assert.equal(await page.waitFor(`() => (${row(added)})() === "synced Call Bob"`), true);
      assert.equal((await admin.get("note", added)).data?.title, "Call Bob");

      // Edit: click the note, change its title, save.
      await page.evaluate(`document.querySelector('#notes li[data-id="milk"]').click()`);
      await page.evaluate(`document.querySelector("#edit-title").select()`);
      await page.type("Buy oat milk");
      await page.evaluate(`document.querySelector("#edit button").click()`);
      assert.equal(await page.waitFor(`() => (${row("milk")})() === "synced Buy oat milk"`), true);
      assert.equal(await page.waitFor(`() => document.querySelector("#edit").offsetParent === null`), true, "the edit form goes once saved");
      assert.equal((await admin.get("note", "milk")).data?.title, "Buy oat milk");

      // Another app's write and delete show live.
      await admin.create("note", { title: "Water plants" }, { id: "plants" });
      assert.equal(await page.waitFor(`() => (${row("plants")})() === "synced Water plants"`), true);
      await admin.delete("note", "plants");
      assert.equal(await page.waitFor(`() => !document.querySelector('#notes li[data-id="plants"]')`), true);

      // The daemon killed: the page says so; back: online, and live again.
      await d.kill();
      assert.equal(await page.waitFor(`() => (${status})() === "unreachable"`), true);
      d = await startDaemon({ dataDir: d.dataDir, port: d.port, args: ["--allowed-origin", origin] });
      assert.equal(await page.waitFor(`() => (${status})() === "online"`), true);
      await admin.update("note", added, { title: "Call Bob back" });
      assert.equal(await page.waitFor(`() => (${row(added)})() === "synced Call Bob back"`), true);
      assert.equal(await page.evaluate(`document.querySelector("#error").textContent`), "");
      if (process.env.SYNCD_JS_SCREENSHOT) writeFileSync(process.env.SYNCD_JS_SCREENSHOT, await page.screenshot());
    } finally {
      await page?.close();
      serve.p.kill("SIGTERM");
      await serve.exited;
      await d.stop();
    }
  });
});
