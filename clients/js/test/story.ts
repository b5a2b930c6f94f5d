// The order of what a live list showed: every value it gave (a live
// query's results, a hook's committed renders) taken together, not only
// the ones a test waited for. next() and Recorder.until() pass over the
// values between two waits; a list that went back in between (a deleted
// row shown again, a stale list after a resync) would go unseen by them.

import assert from "node:assert/strict";

export interface Stage<V> {
  name: string;
  /** The value shows this stage. */
  reached: (v: V) => boolean;
  /** A value shows what this stage undid: none may, after the stage is first reached. */
  undone?: (v: V) => boolean;
}

/**
 * The values went through the stages in their order: each is first
 * reached by a value after the one that first reached the stage before,
 * and no value after that shows it undone.
 */
export function assertStages<V>(values: readonly V[], stages: readonly Stage<V>[], show: (v: V) => unknown = (v) => v): void {
  let from = 0;
  for (const s of stages) {
    const i = values.findIndex((v, j) => j >= from && s.reached(v));
    assert.ok(i >= 0, `${s.name}: not shown after the stage before (values ${from}..${values.length - 1})`);
    if (s.undone) {
      const j = values.findIndex((v, k) => k > i && s.undone!(v));
      if (j >= 0) assert.fail(`${s.name} (first shown by value ${i}) undone by value ${j}: ${JSON.stringify(show(values[j]!))?.slice(0, 400)}`);
    }
    from = i + 1;
  }
}

/** An iterator that records each value it gives. */
export function recording<R>(q: AsyncIterator<R>, into: R[]): AsyncIterator<R> {
  return {
    next: async () => {
      const r = await q.next();
      if (!r.done) into.push(r.value);
      return r;
    },
    return: async (v?: unknown) => (q.return ? q.return(v) : { value: undefined, done: true }),
  };
}

interface Row {
  id: string;
  syncState: string;
  data?: { title: string } | null;
}

/**
 * The story of live.test.ts and react.test.ts, as the live list of
 * device A shows it: a local write (n1, n2), B's change pulled (n1
 * c-remote), a delete (n2), a conflict (n1) and its resolution (A's
 * e-from-a, synced), n3 written, the resync that drops it, n4 after.
 */
export function listStory<V>(items: (v: V) => readonly Row[], resynced: (v: V) => boolean = () => true): Stage<V>[] {
  const row = (v: V, id: string) => items(v).find((e) => e.id === id);
  const title = (v: V, id: string) => row(v, id)?.data?.title;
  return [
    {
      name: "the local write",
      reached: (v) => title(v, "n1") === "a-local" && row(v, "n2") !== undefined && items(v).every((e) => e.syncState === "synced"),
      undone: (v) => row(v, "n1") === undefined,
    },
    { name: "the pulled change", reached: (v) => title(v, "n1") === "c-remote", undone: (v) => title(v, "n1") === "a-local" },
    { name: "the delete", reached: (v) => row(v, "n2") === undefined, undone: (v) => row(v, "n2") !== undefined },
    {
      name: "the conflict",
      reached: (v) => row(v, "n1")?.syncState === "conflict",
      undone: (v) => title(v, "n1") === "a-local" || title(v, "n1") === "c-remote",
    },
    {
      name: "the resolution",
      reached: (v) => row(v, "n1")?.syncState === "synced" && title(v, "n1") === "e-from-a",
      undone: (v) => row(v, "n1")?.syncState === "conflict",
    },
    { name: "the write before the resync", reached: (v) => row(v, "n3") !== undefined },
    { name: "the resync", reached: (v) => row(v, "n3") === undefined && resynced(v), undone: (v) => row(v, "n3") !== undefined },
    { name: "the write after the resync", reached: (v) => row(v, "n4") !== undefined, undone: (v) => row(v, "n4") === undefined },
  ];
}
