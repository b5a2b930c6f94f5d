// Must NOT compile: the hooks' types (test/typetests.test.ts).
import { createClient } from "@syncd/client";
import { SyncdProvider, useConflicts, useEntity, useList, useSyncStatus } from "@syncd/client/react";

interface Note {
  title: string;
  done?: boolean;
}

const client = createClient<{ note: Note }>({ token: "t" });

export function Wrong() {
  useList(client, "nots"); // error: TS2769
  useList(client, "note", { orderBy: "titel" }); // error: TS2820
  useList(client, "note", { filter: { title: 1 } }); // error: TS2322
  useList(client, "note", { syncState: "syncing" }); // error: TS2322
  const list = useList(client, "note");
  void list.items[0].data; // error: TS2532
  const { entity } = useEntity(client, "note", "n1");
  void entity.data; // error: TS18048
  useConflicts(client, "note", { syncState: "pending" }); // error: TS2353
  if (useSyncStatus().state === "connected") return null; // error: TS2367
  return <SyncdProvider>{null}</SyncdProvider>; // error: TS2741
}
