// A tiny notes app for the terminal, over a running syncd: lists the
// notes live with each one's sync state and the daemon's, adds or edits
// one, and prints every change as it happens.
//
//   node dist/examples/notes.js                          list, then follow changes until Ctrl-C
//   node dist/examples/notes.js add "Buy milk"           add a note, follow it until it is synced
//   node dist/examples/notes.js edit ID "Buy oat milk"   edit one, the same
//   ... --account alice --access-token alice.1           sign the user in first
//
// It finds the daemon as `syncd` does (connect(): the config file,
// SYNCD_ADDR, SYNCD_DATA_DIR, the Unix socket); --addr and --token (or
// SYNCD_TOKEN: an app token from `syncd apps add notes --types note`)
// name it instead.

import { createClient, SyncdError, type Entity, type SyncdClient, type SyncStatus } from "@syncd/client";
import { connect } from "@syncd/client/node";
import { parseArgs } from "node:util";

interface Note {
  title: string;
}
type Client = SyncdClient<{ note: Note }>;

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    addr: { type: "string" },
    token: { type: "string" },
    account: { type: "string" },
    "access-token": { type: "string" },
  },
});
const token = values.token ?? process.env.SYNCD_TOKEN;
const client: Client = values.addr
  ? createClient<{ note: Note }>({ addr: values.addr, token: token ?? "" })
  : await connect<{ note: Note }>(token ? { token } : {});

// Signing the user in is the app's job (the access token is the one its
// server gave): with --account and --access-token, as a first run would.
const [command, ...args] = positionals;
let follow: string | undefined; // the note to follow until it settles
try {
  if (values.account) await client.setSession(values.account, values["access-token"] ?? "");
  if (command === "add" && args.length === 1) {
    const n = await client.create("note", { title: args[0]! });
    console.log(`added ${n.id}`);
    follow = n.id;
  } else if (command === "edit" && args.length === 2) {
    await client.update("note", args[0]!, { title: args[1]! });
    console.log(`edited ${args[0]}`);
    follow = args[0];
  } else if (command !== undefined) {
    console.error("usage: notes [add TITLE | edit ID TITLE] [--addr HOST:PORT] [--token TOKEN] [--account ID --access-token TOKEN]");
    process.exit(2);
  }
} catch (err) {
  fail(err); // no session, not found, daemon_unreachable...
}

const status = client.watchStatus({ onChange: (s) => console.log(describe(s)) });
const live = client.live("note", { orderBy: "title" });
const stop = () => {
  live.close(); // ends the loop below
  status.close();
};
process.once("SIGINT", stop);
process.once("SIGTERM", stop);

try {
  for await (const { items } of live) {
    console.log(`notes (${items.length}):`);
    for (const n of items) console.log(`  ${n.id}  ${n.syncState.padEnd(8)}  ${n.data?.title ?? ""}`);
    const f = follow === undefined ? undefined : items.find((n: Entity<Note>) => n.id === follow);
    if (f && f.syncState !== "pending") {
      console.log(`${f.id} is ${f.syncState}`);
      stop();
    }
  }
} catch (err) {
  // The query ended for good: no session (409 no_session), a token revoked...
  stop();
  fail(err);
}

/** Says what went wrong by its code, and exits 1. */
function fail(err: unknown): never {
  console.error(err instanceof SyncdError ? `notes: ${err.code}: ${err.message}` : err);
  process.exit(1);
}
// Everything is closed: node exits by itself.
process.removeListener("SIGINT", stop);
process.removeListener("SIGTERM", stop);

function describe(s: SyncStatus): string {
  if (s.state === "unreachable") return "sync: the daemon is not answering (is syncd running?)";
  if (s.error) return `sync: ${String(s.error)}`;
  const c = s.counts;
  const paused = s.state === "paused" ? ` (${s.status?.pauseReason ?? ""})` : "";
  return `sync: ${s.state ?? "..."}${paused}, ${c.pending + c.sending + c.retry_waiting} to send, ${c.permanent_failed} failed`;
}
