// Finding the daemon from Node or Electron's main process: the same
// config file and data directory `syncd` uses, with the same per-OS
// defaults (config/paths*.go).

import { request } from "node:http";
import { connect as netConnect } from "node:net";
import { readFile, stat } from "node:fs/promises";
import { homedir } from "node:os";
import { dirname, isAbsolute, join } from "node:path";
import { SyncdClient, type ClientOptions, type WebSocketConstructor } from "./index.js";
import type { AnySchema, Schema } from "./types.js";

export interface Located {
  addr: string;
  /** The daemon's Unix socket, when it has one here (Linux, macOS); connect() prefers it. */
  socket?: string;
  token: string;
  dataDir: string;
  configFile: string;
}

/** The default data directory and config file, as `syncd` computes them. */
export function defaultPaths(
  env: Record<string, string | undefined> = process.env,
  platform: NodeJS.Platform = process.platform,
  system = typeof process.geteuid === "function" && process.geteuid() === 0,
): { dataDir: string; configFile: string } {
  if (platform === "win32") {
    const sys = (env.USERPROFILE ?? "").toLowerCase().includes("\\systemprofile");
    const base = sys ? env.ProgramData : env.LocalAppData;
    if (!base) throw new Error(`syncd: %${sys ? "ProgramData" : "LocalAppData"}% is not set`);
    const dir = join(base, "syncd");
    return { dataDir: dir, configFile: join(dir, "syncd.json") };
  }
  if (platform === "darwin") {
    const dir = system ? "/Library/Application Support/syncd" : join(env.HOME ?? homedir(), "Library", "Application Support", "syncd");
    return { dataDir: dir, configFile: join(dir, "syncd.json") };
  }
  if (system) return { dataDir: "/var/lib/syncd", configFile: "/etc/syncd/syncd.json" };
  const home = env.HOME ?? homedir();
  const data = env.XDG_DATA_HOME && isAbsolute(env.XDG_DATA_HOME) ? env.XDG_DATA_HOME : join(home, ".local", "share");
  const conf = env.XDG_CONFIG_HOME && isAbsolute(env.XDG_CONFIG_HOME) ? env.XDG_CONFIG_HOME : join(home, ".config");
  return { dataDir: join(data, "syncd"), configFile: join(conf, "syncd", "syncd.json") };
}

/**
 * Reads where syncd listens and its API token, as `syncd status` does:
 * SYNCD_CONFIG or the default config file (listen, socket, dataDir),
 * SYNCD_ADDR, SYNCD_SOCKET and SYNCD_DATA_DIR over it, then the data
 * directory's api-token (optional when the caller has an app token). Errors
 * say what is missing: syncd not installed or not run yet (no token
 * file), or a token this user may not read.
 */
export async function locate(env: Record<string, string | undefined> = process.env, tokenOptional = false): Promise<Located> {
  const paths = defaultPaths(env);
  const configFile = env.SYNCD_CONFIG ?? paths.configFile;
  let cfg: { listen?: string; dataDir?: string; socket?: string } = {};
  try {
    cfg = JSON.parse(await readFile(configFile, "utf8")) as typeof cfg;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "ENOENT" || env.SYNCD_CONFIG) {
      throw new Error(`syncd: reading the config file ${configFile}: ${(err as Error).message}`);
    }
  }
  const addr = env.SYNCD_ADDR ?? env.SYNCD_LISTEN ?? cfg.listen ?? "127.0.0.1:7419";
  const dataDir = env.SYNCD_DATA_DIR ?? cfg.dataDir ?? paths.dataDir;
  const tokenFile = join(dataDir, "api-token");
  let token: string;
  try {
    token = (await readFile(tokenFile, "utf8")).trim();
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (tokenOptional) return { addr, token: "", dataDir, configFile, socket: await findSocket(env, cfg.socket, dataDir) };
    if (code === "ENOENT") {
      throw new Error(`syncd: no API token at ${tokenFile}: is syncd installed and has it run once? (syncd run, or syncd service install)`);
    }
    if (code === "EACCES" || code === "EPERM") {
      throw new Error(`syncd: the API token ${tokenFile} is not readable by this user (a system-wide syncd keeps it for its own user)`);
    }
    throw new Error(`syncd: reading the API token ${tokenFile}: ${(err as Error).message}`);
  }
  if (!token) throw new Error(`syncd: the API token file ${tokenFile} is empty`);
  return { addr, token, dataDir, configFile, socket: await findSocket(env, cfg.socket, dataDir) };
}

/**
 * The daemon's Unix socket, as the syncd CLI finds it: none when an
 * address is given (SYNCD_ADDR); else SYNCD_SOCKET, the config's socket,
 * or on Linux and macOS the data directory's syncd.sock; "off" means
 * none, and so does a path where no socket is (a daemon serving on TCP
 * only).
 */
async function findSocket(env: Record<string, string | undefined>, configured: string | undefined, dataDir: string): Promise<string | undefined> {
  if (process.platform === "win32" || env.SYNCD_ADDR) return undefined;
  const p = env.SYNCD_SOCKET ?? configured ?? join(dataDir, "syncd.sock");
  if (p === "" || p === "off") return undefined;
  let st;
  try {
    st = await stat(p);
  } catch {
    return undefined;
  }
  if (!st.isSocket()) return undefined;
  // Node cannot ask the kernel who listens on a socket (the Go client
  // does): at least the socket and its directory must be this user's,
  // and the directory closed to others, as syncd makes them, or the
  // token is not sent there.
  const uid = process.geteuid?.();
  const dir = await stat(dirname(p));
  if (uid !== undefined && (st.uid !== uid || dir.uid !== uid || (dir.mode & 0o077) !== 0)) {
    throw new Error(`syncd: the socket ${p} or its directory is not this user's alone (socket uid ${st.uid}, directory uid ${dir.uid} mode ${(dir.mode & 0o777).toString(8)}); not sending the token there`);
  }
  return p;
}

/**
 * A fetch that sends each request to the daemon's Unix socket (Node's
 * http with socketPath), for SyncdClient's `fetch` with `socketPath`.
 */
export function unixFetch(socketPath: string): typeof fetch {
  return ((input: string | URL | Request, init?: RequestInit): Promise<Response> => {
    const url = new URL(typeof input === "string" ? input : input instanceof URL ? input.href : input.url);
    const headers: Record<string, string> = { ...(init?.headers as Record<string, string> | undefined), Host: "localhost" };
    return new Promise<Response>((resolve, reject) => {
      const req = request({ socketPath, path: url.pathname + url.search, method: init?.method ?? "GET", headers }, (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (c: Buffer) => chunks.push(c));
        res.on("error", reject);
        res.on("end", () => {
          const h = new Headers();
          for (const [k, v] of Object.entries(res.headers)) {
            if (v !== undefined) h.set(k, Array.isArray(v) ? v.join(", ") : v);
          }
          const status = res.statusCode ?? 500;
          const empty = status === 204 || status === 304;
          resolve(new Response(empty ? null : Buffer.concat(chunks), { status, statusText: res.statusMessage, headers: h }));
        });
      });
      req.on("error", reject);
      req.end(init?.body as string | undefined);
    });
  }) as typeof fetch;
}

/**
 * A WebSocket constructor (the `ws` package's) whose connections go to
 * the daemon's Unix socket, for SyncdClient's `WebSocket` with
 * `socketPath`: the URL's host is then only a name.
 */
export function unixWebSocket(WS: WebSocketConstructor, socketPath: string): WebSocketConstructor {
  const Base = WS as unknown as new (u: string, p: string[] | undefined, o: Record<string, unknown>) => object;
  return class extends Base {
    constructor(url: string, protocols?: string | string[], options: Record<string, unknown> = {}) {
      super(url, typeof protocols === "string" ? [protocols] : protocols, { ...options, createConnection: () => netConnect(socketPath) });
    }
  } as unknown as WebSocketConstructor;
}

/**
 * The `ws` package's WebSocket, when it is installed (an optional peer
 * dependency), else undefined.
 */
export async function loadWs(): Promise<WebSocketConstructor | undefined> {
  const name: string = "ws"; // not a literal: bundlers and tsc leave it alone
  try {
    const mod = (await import(name)) as { default?: WebSocketConstructor; WebSocket?: WebSocketConstructor };
    return mod.default ?? mod.WebSocket;
  } catch {
    return undefined;
  }
}

/**
 * A client for the daemon located as `locate` does: over its Unix socket
 * when it has one here, else over TCP. `token` overrides the admin token
 * read from the data directory: an app passes its app token (from
 * `syncd apps add`). The WebSocket for subscribe and live is the one
 * passed, else over the socket the `ws` package's (Node's own cannot dial
 * a socket), else the global one (Node 22+), else `ws`'s; subscribe
 * throws when there is none (Node 20 without `ws` installed).
 */
export async function connect<S extends Schema = AnySchema>(
  opts: Omit<ClientOptions, "addr" | "token" | "socketPath"> & { token?: string } = {},
  env: Record<string, string | undefined> = process.env,
): Promise<SyncdClient<S>> {
  const l = await locate(env, opts.token !== undefined);
  const token = opts.token ?? l.token;
  if (l.socket !== undefined) {
    const WS = opts.WebSocket ?? (await loadWs());
    return new SyncdClient<S>({
      ...opts,
      token,
      socketPath: l.socket,
      fetch: opts.fetch ?? unixFetch(l.socket),
      WebSocket: WS && unixWebSocket(WS, l.socket),
    });
  }
  const globalWS = (globalThis as { WebSocket?: WebSocketConstructor }).WebSocket;
  return new SyncdClient<S>({ ...opts, addr: l.addr, token, WebSocket: opts.WebSocket ?? globalWS ?? (await loadWs()) });
}
