import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { it } from "node:test";
import { fileURLToPath } from "node:url";

// Type tests: tsc (strict) on typetests/pass, which must compile, and on
// typetests/fail, where each line marked `// error: TSnnnn` must have that
// error and no other line any. The README's ts blocks are compiled with
// the pass files, so its examples are typed as written.

const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const tsc = join(root, "node_modules", "typescript", "bin", "tsc");

function typecheck(project: string): string {
  try {
    execFileSync(process.execPath, [tsc, "-p", project, "--pretty", "false"], { cwd: root, encoding: "utf8" });
    return "";
  } catch (err) {
    return String((err as { stdout?: string }).stdout ?? err);
  }
}

it("compiles the typed usage and the README's examples under strict tsc", () => {
  const readme = readFileSync(join(root, "README.md"), "utf8");
  const blocks = [...readme.matchAll(/```(tsx?)\n([\s\S]*?)```/g)].map((m) => ({ ext: m[1]!, code: m[2]! }));
  assert.ok(blocks.length >= 3, "the README has ts examples");
  const dir = join(root, "typetests", ".readme");
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  // Each block a module of its own; one without imports continues the
  // session above it: `c` is a client.
  const session = 'import type { SyncdClient } from "@syncd/client";\ndeclare const c: SyncdClient;\n';
  blocks.forEach((b, i) => writeFileSync(join(dir, `block${i}.${b.ext}`), (b.code.includes("import ") ? b.code : session + b.code) + "\nexport {};\n"));
  const out = typecheck("typetests/tsconfig.json");
  assert.equal(out, "", out);
});

it("refuses what must not compile, each where it is marked", () => {
  const out = typecheck("typetests/tsconfig.fail.json");
  const got = new Set<string>();
  for (const m of out.matchAll(/^(\S+\.tsx?)\((\d+),\d+\): error (TS\d+)/gm)) got.add(`${m[1]}:${m[2]} ${m[3]}`);
  const want = new Set<string>();
  const dir = join(root, "typetests", "fail");
  for (const f of readdirSync(dir)) {
    readFileSync(join(dir, f), "utf8").split("\n").forEach((line, i) => {
      const m = /\/\/ error: (TS\d+)/.exec(line);
      if (m) want.add(`${relative(root, join(dir, f))}:${i + 1} ${m[1]}`);
    });
  }
  assert.ok(want.size >= 10);
  assert.deepEqual([...got].sort(), [...want].sort());
});
