import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { it } from "node:test";
import { fileURLToPath } from "node:url";
import { errorCodes, members } from "../src/types.js";

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
