// Starts real syncd daemons for the tests: built once from this
// repository with `go build`, each on a free loopback port with its own
// data directory and the embedded reference server.

import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const repo = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..", "..");
let binary: string | undefined;

export function syncdBinary(): string {
  if (!binary) {
    const dir = mkdtempSync(join(tmpdir(), "syncd-js-bin-"));
    binary = join(dir, process.platform === "win32" ? "syncd.exe" : "syncd");
    execFileSync("go", ["build", "-o", binary, "./cmd/syncd"], { cwd: repo, stdio: "inherit" });
    process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
  }
  return binary;
}

export function freePort(): Promise<number> {
  return new Promise((res, rej) => {
    const s = createServer();
    s.listen(0, "127.0.0.1", () => {
      const a = s.address();
      s.close(() => (typeof a === "object" && a ? res(a.port) : rej(new Error("no port"))));
    });
  });
}

export interface Daemon {
  proc: ChildProcess;
  addr: string;
  token: string;
  dataDir: string;
  port: number;
  /** SIGKILL, and wait for the exit. */
  kill(): Promise<void>;
  /** SIGTERM, and wait for the exit. */
  stop(): Promise<void>;
}

/** Starts `syncd run` (on port, in dataDir, when given: a restart). */
export async function startDaemon(o: { dataDir?: string; port?: number; args?: string[] } = {}): Promise<Daemon> {
  const dataDir = o.dataDir ?? mkdtempSync(join(tmpdir(), "syncd-js-data-"));
  const port = o.port ?? (await freePort());
  const proc = spawn(syncdBinary(), ["run", "--data-dir", dataDir, "--listen", `127.0.0.1:${port}`, ...(o.args ?? [])], {
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  await new Promise<void>((res, rej) => {
    const t = setTimeout(() => rej(new Error("syncd did not start: " + out)), 30000);
    proc.stdout!.on("data", (b: Buffer) => {
      out += b.toString();
      if (out.includes("syncd: API token in")) {
        clearTimeout(t);
        res();
      }
    });
    proc.stderr!.on("data", (b: Buffer) => (out += b.toString()));
    proc.on("exit", (code) => {
      clearTimeout(t);
      rej(new Error(`syncd exited ${code}: ${out}`));
    });
  });
  const exited = new Promise<void>((res) => proc.on("exit", () => res()));
  const token = readFileSync(join(dataDir, "api-token"), "utf8").trim();
  return {
    proc,
    addr: `127.0.0.1:${port}`,
    token,
    dataDir,
    port,
    kill: async () => {
      proc.kill("SIGKILL");
      await exited;
    },
    stop: async () => {
      proc.kill("SIGTERM");
      await exited;
    },
  };
}

/** Starts `syncd server` (the reference server) on a free port; extra args after. */
export async function startServer(args: string[] = []): Promise<{ url: string; stop: () => Promise<void> }> {
  const dataDir = mkdtempSync(join(tmpdir(), "syncd-js-server-"));
  const port = await freePort();
  const proc = spawn(syncdBinary(), ["server", "--listen", `127.0.0.1:${port}`, "--data-dir", dataDir, "--dev-tokens", ...args], {
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  await new Promise<void>((res, rej) => {
    const t = setTimeout(() => rej(new Error("syncd server did not start: " + out)), 30000);
    proc.stdout!.on("data", (b: Buffer) => {
      out += b.toString();
      if (out.includes("listening on")) {
        clearTimeout(t);
        res();
      }
    });
    proc.stderr!.on("data", (b: Buffer) => (out += b.toString()));
    proc.on("exit", (code) => {
      clearTimeout(t);
      rej(new Error(`syncd server exited ${code}: ${out}`));
    });
  });
  const exited = new Promise<void>((res) => proc.on("exit", () => res()));
  return {
    url: `http://127.0.0.1:${port}`,
    stop: async () => {
      proc.kill("SIGTERM");
      await exited;
    },
  };
}
