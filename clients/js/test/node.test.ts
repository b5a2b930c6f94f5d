import assert from "node:assert/strict";
import { chmodSync, mkdirSync, mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { it } from "node:test";
import { defaultPaths, locate } from "../src/node.js";

it("finds syncd as syncd does: config file, env, data directory", async () => {
  const dir = mkdtempSync(join(tmpdir(), "syncd-js-locate-"));
  const data = join(dir, "data");
  mkdirSync(data);
  writeFileSync(join(data, "api-token"), "tok-123\n");
  const conf = join(dir, "syncd.json");
  writeFileSync(conf, JSON.stringify({ listen: "127.0.0.1:7600", dataDir: data }));
  const l = await locate({ SYNCD_CONFIG: conf, HOME: dir });
  assert.equal(l.addr, "127.0.0.1:7600");
  assert.equal(l.token, "tok-123");
  const over = await locate({ SYNCD_CONFIG: conf, SYNCD_ADDR: "127.0.0.1:7700", HOME: dir });
  assert.equal(over.addr, "127.0.0.1:7700");
  // No token file: syncd never ran.
  await assert.rejects(locate({ SYNCD_DATA_DIR: join(dir, "none"), HOME: dir }), /no API token .* has it run once/);
  // A config file named but missing.
  await assert.rejects(locate({ SYNCD_CONFIG: join(dir, "nope.json"), HOME: dir }), /reading the config file/);
  if (process.getuid?.() !== 0) {
    chmodSync(join(data, "api-token"), 0o000);
    await assert.rejects(locate({ SYNCD_DATA_DIR: data, HOME: dir }), /not readable by this user/);
  }
});

it("has syncd's per-OS default paths", () => {
  assert.deepEqual(defaultPaths({ HOME: "/home/a" }, "linux", false), {
    dataDir: "/home/a/.local/share/syncd",
    configFile: "/home/a/.config/syncd/syncd.json",
  });
  assert.deepEqual(defaultPaths({ HOME: "/home/a", XDG_DATA_HOME: "/x", XDG_CONFIG_HOME: "rel" }, "linux", false), {
    dataDir: "/x/syncd",
    configFile: "/home/a/.config/syncd/syncd.json",
  });
  assert.equal(defaultPaths({}, "linux", true).dataDir, "/var/lib/syncd");
  assert.equal(defaultPaths({ HOME: "/Users/a" }, "darwin", false).dataDir, "/Users/a/Library/Application Support/syncd");
  assert.match(defaultPaths({ LocalAppData: "C:\\Users\\a\\AppData\\Local", USERPROFILE: "C:\\Users\\a" }, "win32", false).dataDir, /syncd$/);
});
