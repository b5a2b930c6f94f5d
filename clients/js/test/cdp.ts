// Headless Chromium (Debian's package) driven over the DevTools protocol:
// open a page, evaluate in it, wait for what it shows (a MutationObserver
// in the page, not a timer), type as a user does. For the example page.

import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import WebSocket from "ws";

export const chromium = process.env.SYNCD_CHROMIUM ?? ["/usr/bin/chromium", "/usr/bin/chromium-browser"].find((p) => existsSync(p));

/**
 * The browser tests' skip option: they skip on a machine without
 * Chromium, but not in CI (CI=true), where .ci/run installs it: there a
 * missing browser fails them instead of hiding them.
 */
export const noChromium: false | string =
  chromium || process.env.CI ? false : "Chromium not found (Debian's chromium package; .ci/run installs it)";

export interface Page {
  /** The value of a JavaScript expression in the page (promises awaited). */
  evaluate<T>(expression: string): Promise<T>;
  /** Waits until the function's source, called in the page after each DOM change, returns a truthy value: that value. */
  waitFor<T>(fn: string): Promise<T>;
  /** Types text into the focused element as keyboard input. */
  type(text: string): Promise<void>;
  screenshot(): Promise<Buffer>;
  close(): Promise<void>;
}

export async function openPage(url: string): Promise<Page> {
  const profile = mkdtempSync(join(tmpdir(), "syncd-js-chromium-"));
  if (!chromium) throw new Error("Chromium not found: install Debian's chromium package, or set SYNCD_CHROMIUM");
  const browser: ChildProcess = spawn(chromium, ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic",
    "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
    `--user-data-dir=${profile}`, "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0", "about:blank"], { stdio: ["ignore", "ignore", "pipe"], detached: true });
  const kill = () => {
    try {
      process.kill(-browser.pid!, "SIGKILL"); // the browser and its helpers
    } catch {
      // gone already
    }
    rmSync(profile, { recursive: true, force: true });
  };
  try {
    // "DevTools listening on ws://127.0.0.1:PORT/devtools/browser/..."
    const port = await new Promise<string>((res, rej) => {
      let err = "";
      browser.stderr!.on("data", (b: Buffer) => {
        err += b.toString();
        const m = /DevTools listening on ws:\/\/127\.0\.0\.1:(\d+)\//.exec(err);
        if (m) res(m[1]!);
      });
      browser.on("exit", (code) => rej(new Error(`chromium exited ${code}: ${err}`)));
    });
    const targets = (await (await fetch(`http://127.0.0.1:${port}/json/list`)).json()) as { type: string; url: string; webSocketDebuggerUrl: string }[];
    const target = targets.find((t) => t.type === "page");
    if (!target) throw new Error("no page in chromium");
    const ws = new WebSocket(target.webSocketDebuggerUrl);
    await new Promise((res, rej) => {
      ws.once("open", res);
      ws.once("error", rej);
    });
    let id = 0;
    const pending = new Map<number, { res: (v: unknown) => void; rej: (e: Error) => void }>();
    const events = new Map<string, () => void>();
    ws.on("message", (data) => {
      const msg = JSON.parse(String(data)) as { id?: number; method?: string; result?: unknown; error?: { message: string } };
      if (msg.method) events.get(msg.method)?.();
      const p = msg.id === undefined ? undefined : pending.get(msg.id);
      if (!p) return;
      pending.delete(msg.id!);
      if (msg.error) p.rej(new Error(msg.error.message));
      else p.res(msg.result);
    });
    ws.on("close", () => {
      for (const p of pending.values()) p.rej(new Error("the DevTools connection closed"));
    });
    const send = (method: string, params: object = {}) =>
      new Promise<unknown>((res, rej) => {
        pending.set(++id, { res, rej });
        ws.send(JSON.stringify({ id, method, params }));
      });
    const evaluate = async <T>(expression: string): Promise<T> => {
      const r = (await send("Runtime.evaluate", { expression, awaitPromise: true, returnByValue: true })) as {
        result: { value?: unknown };
        exceptionDetails?: { text: string; exception?: { description?: string } };
      };
      if (r.exceptionDetails) throw new Error(`in the page: ${r.exceptionDetails.exception?.description ?? r.exceptionDetails.text}`);
      return r.result.value as T;
    };
    // Opened on about:blank, then navigated: evaluations start in the
    // page's own context once it has loaded (its modules run by then).
    await send("Page.enable");
    const loaded = new Promise<void>((res) => events.set("Page.loadEventFired", res));
    await send("Page.navigate", { url });
    await loaded;
    return {
      evaluate,
      waitFor: <T>(fn: string) =>
        evaluate<T>(`new Promise((resolve) => {
          const f = ${fn};
          const check = () => { let v; try { v = f(); } catch { return; } if (v) { obs.disconnect(); resolve(v); } };
          const obs = new MutationObserver(check);
          obs.observe(document, { subtree: true, childList: true, characterData: true, attributes: true });
          check();
        })`),
      type: async (text: string) => {
        await send("Input.insertText", { text });
      },
      screenshot: async () => Buffer.from(((await send("Page.captureScreenshot", { format: "png" })) as { data: string }).data, "base64"),
      close: async () => {
        ws.close();
        kill();
      },
    };
  } catch (err) {
    kill();
    throw err;
  }
}
