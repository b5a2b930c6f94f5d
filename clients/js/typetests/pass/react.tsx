// Must compile under strict tsc: the hooks as the README shows them,
// typed through the client's schema map (client first) or named
// (provider's client), in JSX.
import { createClient } from "@syncd/client";
import {
  SyncdProvider, useConflicts, useEntity, useList, useSyncdClient, useSyncStatus,
  type LiveEntity, type LiveList, type StatusState, type SyncStatus,
} from "@syncd/client/react";
import { useCallback } from "react";

interface Note {
  title: string;
  done?: boolean;
}
interface Task {
  due: string;
}

const client = createClient<{ note: Note; task: Task }>({ token: "t" });

function Notes(props: { search: string }) {
  const list: LiveList<Note, "note"> = useList(client, "note", { orderBy: "title", filter: { done: false } });
  const title: string | undefined = list.items[0]?.data?.title;
  const type: "note" | undefined = list.items[0]?.type;
  const byFn = useList(client, "note", {
    filter: useCallback((e: { data: Note | null }) => e.data?.title.includes(props.search) ?? false, [props.search]),
    orderBy: { field: "title", desc: true },
  });
  const pending = useList<Note>("note", { syncState: "pending" });
  const tasks = useList(useSyncdClient<{ note: Note; task: Task }>(), "task");
  const due: string | undefined = tasks.items[0]?.data?.due;
  const one: LiveEntity<Note, "note"> = useEntity(client, "note", props.search || null);
  const named = useEntity<Note>("note", "n1");
  const conflicts = useConflicts(client, ["note", "task"]);
  const paths = conflicts.items[0]?.conflict?.paths.map((p) => p.path);
  const status: SyncStatus = useSyncStatus();
  const state: StatusState | undefined = status.state;
  const typedStatus = useSyncStatus(client, { minDelayMs: 50 });
  if (list.loading) return <p>loading</p>;
  if (list.error) return <p>{String(list.error)}</p>;
  void [title, type, byFn, pending, due, one.entity?.data?.title, named.entity?.syncState, paths, typedStatus];
  return (
    <ul data-state={state} data-pending={status.counts.pending}>
      {list.items.map((e) => (
        <li key={e.id}>
          {e.data?.title} ({e.syncState})
        </li>
      ))}
    </ul>
  );
}

export function App() {
  return (
    <SyncdProvider client={client}>
      <Notes search="milk" />
    </SyncdProvider>
  );
}
