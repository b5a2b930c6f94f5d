// Waiting for what a test expects, never for time: the next value of an
// async iterator (a live query) that holds a predicate, or the next value
// recorded (a hook's committed render) that does.

const last = new WeakMap<object, unknown>();

/**
 * The iterator's value once pred holds of it: the latest one when it
 * already does, else the first later one that does (values between are
 * passed over; a live result may show several changes at once).
 */
export async function next<R>(q: AsyncIterator<R>, what: string, pred: (r: R) => boolean): Promise<R> {
  const seen = last.get(q) as R | undefined;
  if (seen !== undefined && pred(seen)) return seen;
  for (;;) {
    const r = await q.next();
    if (r.done) throw new Error(`the live query ended before ${what}`);
    if (process.env.SYNCD_JS_DEBUG) console.error(what, JSON.stringify(r.value).slice(0, 400));
    last.set(q, r.value);
    if (pred(r.value)) return r.value;
  }
}

/** Values as they come (a component's renders), and waits for one that holds a predicate. */
export class Recorder<V> {
  readonly values: V[] = [];
  private waiters: { pred: (v: V) => boolean; resolve: (v: V) => void }[] = [];

  push = (v: V): void => {
    this.values.push(v);
    if (process.env.SYNCD_JS_DEBUG) console.error("recorded", JSON.stringify(v).slice(0, 400));
    this.waiters = this.waiters.filter((w) => {
      if (!w.pred(v)) return true;
      w.resolve(v);
      return false;
    });
  };

  latest(): V | undefined {
    return this.values[this.values.length - 1];
  }

  /** The latest value when pred holds of it, else the first later one that does. */
  until(pred: (v: V) => boolean): Promise<V> {
    const l = this.latest();
    if (l !== undefined && pred(l)) return Promise.resolve(l);
    return new Promise((resolve) => this.waiters.push({ pred, resolve }));
  }
}
