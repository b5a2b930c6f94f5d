import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { it } from "node:test";
import { fileURLToPath } from "node:url";
import { errorCodes, members, type Resolution, type SyncEvent } from "../src/types.js";

// The types cannot drift from the API: every member of a schema in
// localapi/openapi.json is carried by the TypeScript type of that name,
// and every error code is known (as TestClientTypesCarryEveryMember does
// for the Go client).
const spec = JSON.parse(
  readFileSync(join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..", "..", "localapi", "openapi.json"), "utf8"),
) as { components: { schemas: Record<string, { properties?: Record<string, unknown>; enum?: string[] }> } };

it("carries every member of the OpenAPI schemas", () => {
  for (const [name, keys] of Object.entries(members)) {
    const schema = spec.components.schemas[name];
    assert.ok(schema?.properties, `openapi.json has no schema ${name}`);
    const missing = Object.keys(schema.properties).filter((k) => !(keys as readonly string[]).includes(k));
    assert.deepEqual(missing, [], `${name} lacks ${missing.join(", ")}`);
  }
});

it("knows every error code", () => {
  const codes = spec.components.schemas.ErrorCode?.enum ?? [];
  const missing = codes.filter((c) => !(errorCodes as readonly string[]).includes(c));
  assert.deepEqual(missing, []);
});

it("types a resolution as exactly one of take, paths or data, and entity event data", () => {
  const ok: Resolution[] = [{ take: "server" }, { paths: { "/title": "local", "/done": "server" } }, { data: { title: "x" } }];
  // @ts-expect-error: take and data at once
  const both: Resolution = { take: "local", data: {} };
  // @ts-expect-error: a side is server or local
  const wrong: Resolution = { paths: { "/title": "mine" } };
  const e: SyncEvent = { seq: 1, time: "", type: "entity.changed", accountId: "a", entityType: "note", entityId: "n1",
    syncState: "synced", data: { origin: "answer", paths: ["/title"] } };
  const origin: "remote" | "answer" | undefined = e.type === "entity.changed" ? e.data?.origin : undefined;
  assert.equal(ok.length + [both, wrong].length, 5);
  assert.equal(origin, "answer");
});
