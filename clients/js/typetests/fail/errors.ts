// Must NOT compile: each line marked `// error: TSnnnn` has that error,
// and nothing else does (test/typetests.test.ts checks both).
import { createClient, SyncdClient, SyncdError } from "@syncd/client";

interface Note {
  title: string;
  done?: boolean;
}

export async function wrong(err: SyncdError, c: SyncdClient): Promise<void> {
  const typed = createClient<{ note: Note }>({ token: "t" });
  await typed.get("nots", "n1"); // error: TS2769
  await typed.create("note", { title: 1 }); // error: TS2322
  await typed.create("note", { done: true }); // error: TS2741
  await typed.update("note", "n1", { titel: "x" }); // error: TS2561
  await c.list("note", { syncState: "syncing" }); // error: TS2769
  c.subscribe({ type: "entity.chnaged" }); // error: TS2820
  if (err.code === "not_fuond") return; // error: TS2367
  const sub = c.subscribe({ type: "entity.changed" });
  for await (const e of sub) {
    if (e.type === "queue.totals") return; // error: TS2367
    void e.entityId; // error: TS2339
  }
  const n = await typed.get("note", "n1");
  void n.data.title; // error: TS18047
  await typed.resolve("note", "n1", { take: "mine" }); // error: TS2322
  await typed.batch([{ op: "update", type: "note", data: { title: "x" } }]); // error: TS2322
}
