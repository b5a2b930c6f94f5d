// Finding the daemon from Node or Electron's main process: the same
// config file and data directory `syncd` uses, with the same per-OS
// defaults (config/paths*.go).

import { readFile } from "node:fs/promises";
import { homedir } from "node:os";
import { isAbsolute, join } from "node:path";
import { SyncdClient, type ClientOptions } from "./index.js";

export interface Located {
  addr: string;
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
 * SYNCD_CONFIG or the default config file (listen, dataDir), SYNCD_ADDR
 * and SYNCD_DATA_DIR over it, then the data directory's api-token. Errors
 * say what is missing: syncd not installed or not run yet (no token
 * file), or a token this user may not read.
 */
export async function locate(env: Record<string, string | undefined> = process.env): Promise<Located> {
  const paths = defaultPaths(env);
  const configFile = env.SYNCD_CONFIG ?? paths.configFile;
  let cfg: { listen?: string; dataDir?: string } = {};
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
    if (code === "ENOENT") {
      throw new Error(`syncd: no API token at ${tokenFile}: is syncd installed and has it run once? (syncd run, or syncd service install)`);
    }
    if (code === "EACCES" || code === "EPERM") {
      throw new Error(`syncd: the API token ${tokenFile} is not readable by this user (a system-wide syncd keeps it for its own user)`);
    }
    throw new Error(`syncd: reading the API token ${tokenFile}: ${(err as Error).message}`);
  }
  if (!token) throw new Error(`syncd: the API token file ${tokenFile} is empty`);
  return { addr, token, dataDir, configFile };
}

/** A client for the daemon located as `locate` does. */
export async function connect(opts: Omit<ClientOptions, "addr" | "token"> = {}, env: Record<string, string | undefined> = process.env): Promise<SyncdClient> {
  const l = await locate(env);
  return new SyncdClient({ ...opts, addr: l.addr, token: l.token });
}
