// The syncd status page. No framework, no build step: the daemon serves
// this file as it is (docs/ui.md). It reads the local API through the
// page's session (/ui/api/...), keeps itself live from the event stream
// (docs/events.md: resume with since, re-read on resync) and sends every
// write with the session's CSRF token.
"use strict";

(() => {
  const $ = (id) => document.getElementById(id);

  const STATES = ["pending", "sending", "retry_waiting", "permanent_failed", "done"];
  const WAITING = ["pending", "sending", "retry_waiting"];
  // Failed operations with these codes are conflicts: the Conflicts
  // section shows their entities, with the resolve buttons.
  const CONFLICT_CODES = new Set(["version_conflict", "deleted_on_server"]);
  const FAILED_PAGE = 50; // failed operations read at once (conflicts among them)
  const BLOCKED_PAGE = 100; // pending operations read to find the held ones
  const CONFLICT_PAGE = 20; // conflicts read per entity type
  const MAX_EVENTS = 50; // lines kept in the live feed
  const FEED_BACKLOG = 20; // events from before the page opened shown in the feed
  const HISTORY_EVERY = 10_000; // ms between reads of the chart's samples
  const STATUS_EVERY = 10_000; // ms between reads of the status without an event
  const MIN_RELOAD_GAP = 1_000; // no list, status or stream is asked for more than once a second
  // Gaps and ages measured here run on the monotonic clock: a wall clock
  // stepped back (a laptop's time set after sleep) must not hold reads
  // back for as long, nor a step forward let them through at once.
  const mono = () => performance.now();

  let csrf = "";
  let eventsURL = "/ui/api/v1/events";
  let status = null; // the last GET /v1/status, with counts kept by queue.totals
  let statusAt = 0; // when its counts were read (mono(), ms), for ages that tick
  let countsSeq = 0; // the event seq its counts are as of
  let lastSeq = 0; // the last event handled
  let feedSeq = 0; // the newest event in the feed
  let signedIn = false;
  let ws = null;
  let backoff = 0;
  let reconnectTimer = 0;
  let handshakeAt = -Infinity; // when the stream was last asked for (mono(), ms)
  const timers = [];

  // What the lists show, to decide which events concern them.
  let failedShown = new Set(); // operation ids
  let failedAfter = ""; // the page shown starts after this cursor
  let failedNext = "";
  let blockedShown = new Set(); // operation ids, and the ids they wait for
  let blockedAfter = "";
  let conflictShown = new Set(); // "type/id"
  // What each list was last drawn from: a read that brings the same is
  // not drawn again, so focus, armed buttons and choices stay put.
  const drawn = { failed: "", conflicts: "", blocked: "", apps: "" };
  const unchanged = (list, data) => {
    const sig = JSON.stringify(data);
    if (drawn[list] === sig) return true;
    drawn[list] = sig;
    return false;
  };
  const picks = new Map(); // "type/id" + path → the side chosen, kept across redraws
  const conflictTypes = new Set(); // entity types seen in conflict

  // ---- requests ----------------------------------------------------------

  class ApiError extends Error {
    constructor(status, code, message) {
      super(message || code || "HTTP " + status);
      this.status = status;
      this.code = code || "";
    }
  }

  async function request(method, url, body) {
    const headers = { Accept: "application/json" };
    if (method !== "GET") headers["X-CSRF-Token"] = csrf;
    const init = { method, headers, credentials: "same-origin", cache: "no-store" };
    if (body !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    const res = await fetch(url, init);
    let data = null;
    try {
      data = await res.json();
    } catch {
      data = null;
    }
    if (res.status === 401) {
      // Once: the reads still under way when it ended get 401 too. Before
      // the session is confirmed, start() says what it found.
      if (signedIn) signedOut("Your session ended.");
      throw new ApiError(401, "unauthorized", "not signed in");
    }
    if (!res.ok) {
      const err = (data && data.error) || {};
      throw new ApiError(res.status, err.code, err.message);
    }
    return data;
  }

  const api = (method, path, body) => request(method, "/ui/api" + path, body);
  const enc = encodeURIComponent;

  // Which reloads are scheduled or running: <html data-reloads> says
  // "idle" when none is (for tests and tools).
  const busyReloads = new Set();
  function markReloads(key, busy) {
    if (busy) busyReloads.add(key);
    else busyReloads.delete(key);
    document.documentElement.dataset.reloads = busyReloads.size ? "busy" : "idle";
  }

  // A reload that runs at most once per MIN_RELOAD_GAP, however many
  // events ask for it, and never twice at once.
  function throttled(fn) {
    let running = false, again = false, last = -Infinity, timer = 0;
    const key = {};
    const mark = () => markReloads(key, running || timer !== 0);
    const run = async () => {
      timer = 0;
      if (running) { again = true; mark(); return; }
      running = true;
      last = mono();
      mark();
      try {
        await fn();
      } catch (e) {
        if (!(e instanceof ApiError && e.status === 401)) notice("Could not refresh: " + e.message, true);
      } finally {
        running = false;
        if (again) { again = false; schedule(); }
        mark();
      }
    };
    const schedule = () => {
      if (timer || !signedIn) return;
      timer = setTimeout(run, Math.max(0, last + MIN_RELOAD_GAP - mono()));
      mark();
    };
    schedule.now = () => {
      clearTimeout(timer);
      return run();
    };
    // The first view's read: counted as the last one (an event right
    // after it waits out the gap), its error left to the caller.
    schedule.first = async (...args) => {
      running = true;
      last = mono();
      mark();
      try {
        return await fn(...args);
      } finally {
        running = false;
        if (again) { again = false; schedule(); }
        mark();
      }
    };
    return schedule;
  }

  // ---- formatting --------------------------------------------------------

  const num = (n) => (typeof n === "number" ? n.toLocaleString("en") : "–");

  function duration(seconds) {
    seconds = Math.max(0, Math.round(seconds));
    if (seconds < 60) return seconds + " s";
    const m = Math.floor(seconds / 60);
    if (m < 60) return m + " min";
    const h = Math.floor(m / 60);
    if (h < 48) return h + " h " + (m % 60) + " min";
    return Math.floor(h / 24) + " days";
  }

  function ago(iso) {
    if (!iso) return "never";
    const t = Date.parse(iso);
    if (Number.isNaN(t)) return "–";
    return duration((Date.now() - t) / 1000) + " ago";
  }

  function summary(value, max = 160) {
    if (value === undefined) return "(absent)";
    let s = JSON.stringify(value);
    if (s === undefined) s = String(value);
    return s.length > max ? s.slice(0, max - 1) + "…" : s;
  }

  function text(el, s) {
    el.textContent = s;
    return el;
  }

  function h(tag, cls, content) {
    const el = document.createElement(tag);
    if (cls) el.className = cls;
    if (content !== undefined) el.textContent = content;
    return el;
  }

  // A button whose visible text is short and whose accessible name says
  // what it acts on ("Retry" + " create note n1", the latter hidden).
  function label(button, visible, context) {
    button.textContent = visible;
    if (context) button.append(h("span", "visually-hidden", " " + context));
  }

  function clone(id) {
    return $(id).content.firstElementChild.cloneNode(true);
  }

  let noticeTimer = 0;
  function notice(msg, isError) {
    const el = $("notice");
    el.textContent = msg;
    el.dataset.tone = isError ? "error" : "ok";
    clearTimeout(noticeTimer);
    noticeTimer = setTimeout(() => { el.textContent = ""; delete el.dataset.tone; }, 8000);
  }

  // A destructive button acts on its second press: the first arms it
  // for a few seconds and says so. The arming is kept by key, so a list
  // redrawn meanwhile (an event came) keeps the new button armed.
  const armedUntil = new Map();
  function twoStep(button, key, armedText, what, act) {
    const isArmed = () => (armedUntil.get(key) || 0) > mono();
    const render = () => {
      const on = isArmed();
      if (!on) armedUntil.delete(key);
      if (on) button.dataset.armed = "true";
      else delete button.dataset.armed;
      label(button, on ? armedText : button.dataset.idle, button.dataset.context);
    };
    const arm = (ms) => {
      armedUntil.set(key, mono() + ms);
      render();
      setTimeout(render, ms + 20);
    };
    render();
    if (isArmed()) setTimeout(render, armedUntil.get(key) - mono() + 20);
    button.addEventListener("click", async () => {
      if (!isArmed()) {
        arm(6000);
        notice("Press " + armedText + " again to " + what + ".");
        return;
      }
      armedUntil.delete(key);
      render();
      await act();
    });
    button.addEventListener("blur", () => { if (isArmed()) arm(1500); });
  }

  // ---- sign-in -----------------------------------------------------------

  function signedOut(detail) {
    signedIn = false;
    for (const t of timers.splice(0)) clearInterval(t);
    clearTimeout(reconnectTimer);
    if (ws) { ws.onclose = null; ws.close(1000); ws = null; }
    $("app").hidden = true;
    $("logout").hidden = true;
    $("signin").hidden = false;
    text($("signin-detail"), detail || "");
    setBadge("idle", "Not signed in");
    text($("account"), "");
    setLive("off", "Not connected");
    document.body.dataset.view = "signin";
  }

  // A read started before it is awaited: its failure is handled where
  // it is awaited, not reported as unhandled meanwhile.
  function early(promise) {
    promise.catch(() => {});
    return promise;
  }

  async function start() {
    // The first view's reads go out with the session's: nothing is shown
    // before the session is confirmed, but no round trip is lost.
    const pre = {
      status: early(api("GET", "/v1/status")),
      apps: early(api("GET", "/v1/apps")),
      history: early(api("GET", "/v1/status/history")),
    };
    let session;
    try {
      const res = await fetch("/ui/session", { credentials: "same-origin", cache: "no-store", headers: { Accept: "application/json" } });
      if (res.status === 401) { signedOut(""); return; }
      if (!res.ok) throw new Error("HTTP " + res.status);
      session = await res.json();
    } catch (e) {
      signedOut("syncd did not answer (" + e.message + "). Is it running?");
      return;
    }
    csrf = session.csrf_token;
    eventsURL = session.events_url || eventsURL;
    signedIn = true;
    $("signin").hidden = true;
    $("app").hidden = false;
    $("logout").hidden = false;
    document.body.dataset.view = "app";

    // The first view: a few small reads at once, none of them a whole
    // list. The failed operations (and the conflicts among them) are
    // read when the status counts some: finding them among many waiting
    // operations is the one read whose cost grows with the queue.
    const first = [
      reloadStatus.first(pre.status).then(() => {
        if ((shownCounts(status).permanent_failed || 0) > 0) return reloadFailed.first();
        renderFailed([]);
        renderConflicts([], false);
        return undefined;
      }),
      reloadApps.first(pre.apps),
      reloadHistory.first(pre.history),
    ];
    const results = await Promise.allSettled(first);
    const failed = results.find((r) => r.status === "rejected");
    if (signedIn && results.some((r) => r.status === "rejected" && r.reason instanceof ApiError && r.reason.status === 401)) {
      // A read sent before the session was confirmed met it ended.
      signedOut("Your session ended.");
    }
    if (failed && !(failed.reason instanceof ApiError && failed.reason.status === 401)) {
      notice("Some of the page could not be read: " + failed.reason.message, true);
    }
    if (!signedIn) return;
    performance.mark("syncd-first-view");
    document.body.dataset.ready = "true";
    connect();
    reloadBlocked.now();
    // Not while the tab is hidden; at once when it is shown again.
    timers.push(setInterval(() => { if (!document.hidden) { reloadStatus(); reloadHistory(); } }, Math.max(STATUS_EVERY, HISTORY_EVERY)));
    timers.push(setInterval(tick, 1000));
  }

  document.addEventListener("visibilitychange", () => {
    if (!document.hidden && signedIn) { reloadStatus(); reloadHistory(); }
  });

  $("logout").addEventListener("click", async () => {
    try {
      await request("POST", "/ui/logout");
    } catch (e) {
      if (!(e instanceof ApiError && e.status === 401)) { notice("Sign-out failed: " + e.message, true); return; }
    }
    signedOut("You signed out.");
  });

  // ---- status ------------------------------------------------------------

  function setBadge(tone, msg) {
    const b = $("sync-state");
    b.dataset.tone = tone;
    text(b, msg);
  }

  function setLive(state, msg) {
    const el = $("live");
    el.dataset.live = state;
    text(el, msg);
  }

  async function loadStatus(pre) {
    const s = await (pre || api("GET", "/v1/status"));
    if (status && countsSeq > (s.lastEventSeq || 0)) {
      // A queue.totals event newer than this answer came meanwhile:
      // its counts stay.
      for (const k of ["counts", "oldestPendingAgeSeconds", "accountCounts", "accountOldestPendingAgeSeconds"]) s[k] = status[k];
    } else {
      countsSeq = s.lastEventSeq || 0;
      statusAt = mono();
    }
    status = s;
    if (lastSeq === 0) lastSeq = s.lastEventSeq || 0;
    renderStatus();
  }
  const reloadStatus = throttled(loadStatus);

  // The counts the page shows: the signed-in account's, as an app shows
  // its user; another account's queued operations are counted apart.
  function shownCounts(s) {
    return (s.signedIn && s.accountCounts) || s.counts || {};
  }

  function verdict(s) {
    const c = shownCounts(s);
    if (!s.signedIn) {
      return ["warn", "Paused: signed out", "No account is signed in, so nothing is sent or pulled. An app signs in through the local API (PUT /v1/session)."];
    }
    if (s.paused) {
      switch (s.pauseReason) {
        case "session_refresh_needed":
          return ["warn", "Paused: sign-in needed", "The server refused the account's token. Writes wait in the queue until the app signs in again."];
        case "remote_misconfigured":
          return ["error", "Paused: remote misconfigured", "Every operation failed the same way, which looks like a setup mistake. Nothing is lost: writes wait until it is fixed."];
        case "signed_out":
          return ["warn", "Paused: signed out", "No account is signed in."];
        default:
          return ["warn", "Paused (" + s.pauseReason + ")", ""];
      }
    }
    if (s.queueFull) return ["error", "Error: queue full", "The queue reached its size limit: apps' writes are refused until it drains."];
    if (!s.online) return ["warn", "Offline", "The server does not answer. Writes wait in the queue and go when it is back."];
    if (s.pull && s.pull.state === "error") return ["error", "Error: pull failing", "Reading the server's changes fails; syncd retries with backoff."];
    if ((c.permanent_failed || 0) > 0) return ["error", "Online: needs attention", "Some operations failed and wait for you (below)."];
    const waiting = WAITING.reduce((n, k) => n + (c[k] || 0), 0);
    if (waiting > 0) return ["ok", "Online: syncing", num(waiting) + " operations waiting to be sent."];
    return ["ok", "Online: in sync", "Everything written here has reached the server."];
  }

  function renderStatus() {
    const s = status;
    if (!s) return;
    const [tone, msg, detail] = verdict(s);
    setBadge(tone, msg);
    text($("sync-detail"), detail);
    text($("account"), s.signedIn ? "Account: " + s.accountId : "No account signed in");
    const rp = s.remoteProblem;
    $("remote-problem").hidden = !rp;
    if (rp) {
      text($("remote-seen"), rp.seen || rp.kind || "");
      text($("remote-fix"), rp.fix || "");
    }
    renderCounts();
    text($("storage"), "Data file " + bytes(s.fileSizeBytes) + ", queued " + bytes(s.queuedBytes) +
      (s.maxQueueBytes ? " of " + bytes(s.maxQueueBytes) : "") + ".");
    renderPull();
  }

  function renderCounts() {
    const s = status;
    const c = shownCounts(s);
    for (const k of STATES) text($("count-" + k), num(c[k] || 0));
    $("counts").dataset.failed = (c.permanent_failed || 0) > 0 ? "true" : "false";
    const oldest = s.signedIn && s.accountCounts ? s.accountOldestPendingAgeSeconds : s.oldestPendingAgeSeconds;
    const elapsed = (mono() - statusAt) / 1000;
    text($("oldest"), oldest ? duration(oldest + elapsed) : "nothing");
    const other = $("other-accounts");
    if (s.signedIn && s.accountCounts) {
      const all = WAITING.concat("permanent_failed").reduce((n, k) => n + (s.counts[k] || 0), 0);
      const mine = WAITING.concat("permanent_failed").reduce((n, k) => n + (c[k] || 0), 0);
      other.hidden = all === mine;
      text(other, num(all - mine) + " more operations of other accounts wait until those accounts sign in again.");
    } else {
      other.hidden = true;
    }
  }

  function bytes(n) {
    if (typeof n !== "number") return "–";
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return (i === 0 ? n : n.toFixed(1)) + " " + units[i];
  }

  const PULL_STATES = {
    idle: "Up to date",
    pulling: "Reading changes",
    bootstrapping: "Reading everything (first sync)",
    paused: "Paused",
    error: "Error, retrying",
    off: "Off",
  };

  function renderPull() {
    const p = (status && status.pull) || {};
    text($("pull-state"), (PULL_STATES[p.state] || p.state || "–") + (p.mode && p.mode !== "auto" ? " (pull " + p.mode + ")" : ""));
    text($("pull-last"), p.state === "off" ? "–" : ago(p.lastPullAt));
    text($("pull-heard"), p.state === "off" ? "–" : ago(p.lastReadAt));
    text($("pull-received"), num(p.received || 0));
    const boot = p.state === "bootstrapping";
    $("bootstrap").hidden = !boot;
    if (boot) {
      text($("bootstrap-count"), num(p.bootstrapReceived || 0));
      // A fraction when the server says how far its feed goes; else the
      // bar only shows that it is busy.
      const bar = $("bootstrap-progress");
      const share = typeof p.bootstrapProgress === "number" ? Math.min(1, Math.max(0, p.bootstrapProgress)) : null;
      if (share === null) {
        bar.removeAttribute("value");
        text($("bootstrap-share"), "");
      } else {
        bar.max = 1;
        bar.value = share;
        text($("bootstrap-share"), ", about " + Math.floor(share * 100) + "%");
      }
    }
    $("pull-error").hidden = !p.lastError;
    text($("pull-error"), p.lastError ? "Last error: " + p.lastError : "");
  }

  // Once a second: the ages shown go on without a request.
  function tick() {
    if (!status) return;
    renderCounts();
    const p = status.pull || {};
    if (p.state !== "off") {
      text($("pull-last"), ago(p.lastPullAt));
      text($("pull-heard"), ago(p.lastReadAt));
    }
  }

  // ---- failed operations and conflicts ------------------------------------

  async function loadFailedAndConflicts() {
    const q = "?state=permanent_failed&limit=" + FAILED_PAGE + (failedAfter ? "&after=" + enc(failedAfter) : "");
    const page = await api("GET", "/v1/operations" + q);
    const items = page.items || [];
    failedNext = page.next || "";
    const failures = items.filter((op) => !CONFLICT_CODES.has(op.lastErrorCode));
    for (const op of items) if (CONFLICT_CODES.has(op.lastErrorCode)) conflictTypes.add(op.entityType);
    text($("failed-count"), num(failures.length) + (failedNext || failedAfter ? "+" : ""));
    renderFailed(failures);
    await loadConflicts();
  }
  const reloadFailed = throttled(loadFailedAndConflicts);

  function renderFailed(ops) {
    if (unchanged("failed", [ops, failedAfter, failedNext])) return;
    const list = $("failed-list");
    const keepFocus = focusedKey(list);
    list.replaceChildren();
    failedShown = new Set(ops.map((op) => op.id));
    $("failed-empty").hidden = ops.length > 0 || failedAfter !== "";
    for (const op of ops) list.append(failedItem(op));
    $("failed-next").hidden = !failedNext;
    $("failed-first").hidden = !failedAfter;
    restoreFocus(list, keepFocus);
    // Payloads are not in the list's items: read them after the view is up.
    for (const op of ops) loadPayload(op.id, list);
  }

  function failedItem(op) {
    const li = clone("tpl-failed");
    li.id = "op-" + op.id;
    li.dataset.key = op.id;
    const what = op.operationType + " " + op.entityType + "/" + op.entityId;
    text(li.querySelector(".item-title"), what);
    text(li.querySelector(".code"), op.lastErrorCode || "failed");
    text(li.querySelector(".error-text"), op.lastError || "");
    text(li.querySelector(".attempts"), String(op.attemptCount));
    text(li.querySelector(".opid"), op.id);
    text(li.querySelector(".created"), ago(op.createdAt));
    text(li.querySelector(".payload"), op.operationType === "delete" ? "" : "Payload: …");
    const retry = li.querySelector(".retry");
    label(retry, "Retry", what);
    retry.addEventListener("click", () => act(retry, "POST", "/v1/operations/" + enc(op.id) + "/retry", "Sent again: " + what + ".", reloadFailed));
    const discard = li.querySelector(".discard");
    discard.dataset.idle = "Discard";
    discard.dataset.context = what;
    twoStep(discard, "discard " + op.id, "Confirm discard", "drop this write for good", () =>
      act(discard, "POST", "/v1/operations/" + enc(op.id) + "/discard", "Discarded: " + what + ".", reloadFailed));
    return li;
  }

  async function loadPayload(id, list) {
    try {
      const op = await api("GET", "/v1/operations/" + enc(id));
      const li = list.querySelector('[data-key="' + CSS.escape(id) + '"]');
      if (li && op.payload !== undefined) text(li.querySelector(".payload"), "Payload: " + summary(op.payload));
    } catch {
      // gone meanwhile: the next reload drops it
    }
  }

  $("failed-next").addEventListener("click", () => { failedAfter = failedNext; reloadFailed.now().then(() => focusFirst("failed-list")); });
  $("failed-first").addEventListener("click", () => { failedAfter = ""; reloadFailed.now().then(() => focusFirst("failed-list")); });

  async function loadConflicts() {
    const lists = await Promise.all([...conflictTypes].map((t) =>
      api("GET", "/v1/entities/" + enc(t) + "?syncState=conflict&limit=" + CONFLICT_PAGE)
        .then((page) => ({ type: t, items: page.items || [], more: !!page.next }))
        .catch((e) => {
          // A type not configured, or no account signed in: none here.
          if (e instanceof ApiError && (e.status === 404 || e.code === "no_session")) return { type: t, items: [], more: false };
          throw e;
        })));
    const entities = [];
    for (const l of lists) {
      if (l.items.length === 0 && !l.more) conflictTypes.delete(l.type);
      entities.push(...l.items);
    }
    renderConflicts(entities, lists.some((l) => l.more));
  }

  function renderConflicts(entities, more) {
    if (unchanged("conflicts", [entities, more])) return;
    const box = $("conflict-list");
    const keepFocus = focusedKey(box);
    box.replaceChildren();
    conflictShown = new Set(entities.map((e) => e.type + "/" + e.id));
    for (const k of picks.keys()) if (!conflictShown.has(k.slice(0, k.indexOf("\u0000")))) picks.delete(k);
    text($("conflict-count"), num(entities.length) + (more ? "+" : ""));
    $("conflicts-empty").hidden = entities.length > 0;
    for (const e of entities) box.append(conflictItem(e));
    restoreFocus(box, keepFocus);
  }

  function get(obj, pointer) {
    // RFC 6901: "/a/b~1c" → obj.a["b/c"]
    let v = obj;
    for (const raw of pointer.split("/").slice(1)) {
      const k = raw.replace(/~1/g, "/").replace(/~0/g, "~");
      if (v === null || typeof v !== "object" || !Object.prototype.hasOwnProperty.call(v, k)) return undefined;
      v = v[k];
    }
    return v;
  }

  function conflictItem(e) {
    const art = clone("tpl-conflict");
    const key = e.type + "/" + e.id;
    art.dataset.key = key;
    art.id = "conflict-" + key;
    const what = e.type + "/" + e.id;
    const titleId = "conflict-title-" + key;
    const title = art.querySelector(".conflict-title");
    title.id = titleId;
    text(title, what);
    art.setAttribute("aria-labelledby", titleId);
    const srv = e.server || {};
    const byField = !!(e.conflict && e.conflict.paths && e.conflict.paths.length);
    let why = "Another device changed this record since the version this device's change was made on.";
    if (srv.deleted) why = "Another device deleted this record; this device changed it.";
    else if (e.deleted) why = "This device deleted the record; another device changed it.";
    else if (byField) why = "This device and another both changed " + e.conflict.paths.map((p) => p.path).join(", ") + ".";
    text(art.querySelector(".conflict-why"), why);
    text(art.querySelector(".conflict-raw"), e.syncError || "");
    text(art.querySelector("caption"), "Fields of " + what + " on this device and on the server");
    const tbody = art.querySelector("tbody");
    // The value both started from, where the server still keeps it.
    const withBase = byField && e.conflict.paths.some((p) => p.baseKnown);
    if (!withBase) art.querySelector(".base-col").remove();
    const choices = [];
    if (byField) {
      for (const p of e.conflict.paths) {
        const tr = document.createElement("tr");
        tr.append(cell("th", "Field", p.path, "row"));
        if (withBase) tr.append(cell("td", "Before", p.baseKnown ? summary(p.base) : "(not kept)"));
        tr.append(cell("td", "This device", summary(p.local)), cell("td", "Server", summary(p.server)));
        const td = h("td", "choice");
        td.dataset.label = "Keep";
        const fs = h("fieldset", "choice-set");
        const legend = h("legend", "visually-hidden", "Keep which value of " + p.path);
        fs.append(legend);
        const name = "pick-" + key + p.path;
        for (const [side, shown] of [["local", "This device"], ["server", "Server"]]) {
          const lab = h("label", "radio");
          const input = document.createElement("input");
          input.type = "radio";
          input.name = name;
          input.value = side;
          input.dataset.path = p.path;
          const pick = key + "\u0000" + p.path;
          input.checked = picks.get(pick) === side;
          input.addEventListener("change", () => { if (input.checked) picks.set(pick, side); });
          lab.append(input, document.createTextNode(" " + shown));
          fs.append(lab);
        }
        td.append(fs);
        tr.append(td);
        tbody.append(tr);
        choices.push({ path: p.path, name });
      }
    } else {
      // The whole record is in conflict: show it field by field, the
      // fields that differ first.
      art.querySelector(".choice-col").remove();
      const local = e.deleted ? undefined : e.data || {};
      const server = srv.deleted ? undefined : srv.data || {};
      if (local === undefined || server === undefined || srv.missing) {
        const tr = document.createElement("tr");
        tr.append(cell("th", "Field", "(record)", "row"),
          cell("td", "This device", local === undefined ? "deleted" : summary(local, 400)),
          cell("td", "Server", server === undefined ? "deleted" : srv.missing ? "not held here (" + srv.missing + ")" : summary(server, 400)));
        tbody.append(tr);
      } else {
        const keys = [...new Set(Object.keys(local).concat(Object.keys(server)))];
        const differs = (k) => JSON.stringify(local[k]) !== JSON.stringify(server[k]);
        keys.sort((a, b) => (differs(b) - differs(a)) || a.localeCompare(b));
        for (const k of keys) {
          const tr = document.createElement("tr");
          if (differs(k)) tr.className = "differs";
          tr.append(cell("th", "Field", "/" + k, "row"), cell("td", "This device", summary(local[k])), cell("td", "Server", summary(server[k])));
          tbody.append(tr);
        }
      }
    }
    const path = "/v1/entities/" + enc(e.type) + "/" + enc(e.id) + "/resolve";
    const takeLocal = art.querySelector(".take-local");
    label(takeLocal, "Take local", what);
    takeLocal.addEventListener("click", () => act(takeLocal, "POST", path, "Kept this device's " + what + ": it goes to the server.", reloadFailed, { take: "local" }));
    const takeServer = art.querySelector(".take-server");
    label(takeServer, "Take server", what);
    takeServer.addEventListener("click", () => act(takeServer, "POST", path, "Took the server's " + what + ".", reloadFailed, { take: "server" }));
    const takeFields = art.querySelector(".take-fields");
    if (!byField) {
      takeFields.remove();
    } else {
      label(takeFields, "Apply field choices", what);
      takeFields.addEventListener("click", () => {
        const paths = {};
        for (const c of choices) {
          const picked = art.querySelector('input[name="' + CSS.escape(c.name) + '"]:checked');
          if (!picked) {
            notice("Choose a side for " + c.path + " first.", true);
            art.querySelector('input[name="' + CSS.escape(c.name) + '"]').focus();
            return;
          }
          paths[c.path] = picked.value;
        }
        act(takeFields, "POST", path, "Resolved " + what + " field by field.", reloadFailed, { paths });
      });
    }
    return art;
  }

  function cell(tag, lab, content, scope) {
    const el = h(tag, "", content);
    el.dataset.label = lab;
    if (scope) el.scope = scope;
    return el;
  }

  // One action of a button: disabled while it runs, said in the notice.
  async function act(button, method, path, done, reload, body) {
    button.disabled = true;
    try {
      await api(method, path, body);
      notice(done);
      await reload.now();
    } catch (e) {
      if (!(e instanceof ApiError && e.status === 401)) notice("That did not work: " + e.message + (e.code ? " (" + e.code + ")" : ""), true);
    } finally {
      button.disabled = false;
    }
  }

  // Lists are redrawn whole; the focus stays on the same button of the
  // same item when that item is still there, else on the list's first.
  function focusedKey(container) {
    const a = document.activeElement;
    if (!a || !container.contains(a)) return null;
    const item = a.closest("[data-key]");
    return item ? { key: item.dataset.key, cls: a.className.split(" ")[0] } : { key: null };
  }

  function restoreFocus(container, kept) {
    if (!kept) return;
    const item = kept.key && container.querySelector('[data-key="' + CSS.escape(kept.key) + '"]');
    const target = (item && kept.cls && item.querySelector("." + CSS.escape(kept.cls))) || container.querySelector("button, input");
    if (target) target.focus();
    else $(container.closest("section").getAttribute("aria-labelledby")).focus();
  }

  function focusFirst(id) {
    const b = $(id).querySelector("button");
    if (b) b.focus();
  }

  // ---- blocked members of ordered groups ----------------------------------

  async function loadBlocked() {
    const q = "?state=pending&limit=" + BLOCKED_PAGE + (blockedAfter ? "&after=" + enc(blockedAfter) : "");
    const page = await api("GET", "/v1/operations" + q);
    const held = (page.items || []).filter((op) => op.blocked);
    if (unchanged("blocked", [held, page.next, blockedAfter, [...failedShown]])) return;
    const list = $("blocked-list");
    list.replaceChildren();
    blockedShown = new Set();
    for (const op of held) {
      blockedShown.add(op.id);
      blockedShown.add(op.blockedBy);
      const li = clone("tpl-blocked");
      li.dataset.key = op.id;
      text(li.querySelector(".what"), op.operationType + " " + op.entityType + "/" + op.entityId);
      const waits = li.querySelector(".waits");
      waits.textContent = " waits for ";
      if (failedShown.has(op.blockedBy)) {
        const a = h("a", "", "failed operation " + op.blockedBy);
        a.href = "#op-" + op.blockedBy;
        waits.append(a);
      } else {
        waits.append(h("span", "mono", op.blockedBy));
      }
      list.append(li);
    }
    text($("blocked-count"), num(held.length) + (page.next ? "+" : ""));
    $("blocked-empty").hidden = held.length > 0;
    if (held.length === 0 && blockedAfter === "") text($("blocked-empty"), "Nothing is held" + (page.next ? " among the first " + BLOCKED_PAGE + " waiting operations." : "."));
    const more = $("blocked-more");
    more.hidden = !page.next && !blockedAfter;
    more.dataset.next = page.next || "";
    label(more, page.next ? "Look further in the queue" : "Back to the start of the queue");
  }
  const reloadBlocked = throttled(loadBlocked);

  $("blocked-more").addEventListener("click", () => {
    blockedAfter = $("blocked-more").dataset.next || "";
    reloadBlocked.now();
  });

  // ---- apps -------------------------------------------------------------

  async function loadApps(pre) {
    const page = await (pre || api("GET", "/v1/apps"));
    const items = page.items || [];
    for (const a of items) for (const t of a.types || []) conflictTypes.add(t);
    if (unchanged("apps", items)) return;
    const list = $("apps-list");
    const keepFocus = focusedKey(list);
    list.replaceChildren();
    $("apps-empty").hidden = items.length > 0;
    for (const a of items) {
      const li = clone("tpl-app");
      li.dataset.key = a.name;
      text(li.querySelector(".name"), a.name);
      text(li.querySelector(".types"), (a.types || []).join(", "));
      li.querySelector(".ro").hidden = !a.readOnly;
      const rm = li.querySelector(".remove");
      rm.dataset.idle = "Remove";
      rm.dataset.context = "app " + a.name;
      twoStep(rm, "remove " + a.name, "Confirm remove", "revoke the token of " + a.name, () =>
        act(rm, "DELETE", "/v1/apps/" + enc(a.name), "Removed app " + a.name + ": its token no longer works.", reloadApps));
      list.append(li);
    }
    restoreFocus(list, keepFocus);
  }
  const reloadApps = throttled(loadApps);

  $("app-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const form = ev.target;
    const name = $("app-name").value.trim();
    const types = $("app-types").value.split(/[\s,]+/).filter(Boolean);
    const nameOK = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/.test(name);
    $("app-name").setAttribute("aria-invalid", String(!nameOK));
    $("app-types").setAttribute("aria-invalid", String(nameOK && types.length === 0));
    if (!nameOK) {
      notice("An app's name is 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit.", true);
      $("app-name").focus();
      return;
    }
    if (types.length === 0) {
      notice("Give at least one entity type.", true);
      $("app-types").focus();
      return;
    }
    const submit = form.querySelector("button[type=submit]");
    submit.disabled = true;
    try {
      const app = await api("POST", "/v1/apps", { name, types, readOnly: $("app-readonly").checked });
      form.reset();
      text($("app-token-name"), app.name);
      text($("app-token-value"), app.token);
      $("app-token").hidden = false;
      notice("Added app " + app.name + ". Copy its token now: it is not shown again.");
      $("app-token-done").focus();
      await reloadApps.now();
    } catch (e) {
      if (!(e instanceof ApiError && e.status === 401)) notice("Could not add the app: " + e.message, true);
    } finally {
      submit.disabled = false;
    }
  });

  $("app-token-done").addEventListener("click", () => {
    text($("app-token-value"), "");
    $("app-token").hidden = true;
    $("app-name").focus();
  });

  // ---- the chart ---------------------------------------------------------

  let history = null;

  async function loadHistory(pre) {
    try {
      history = await (pre || api("GET", "/v1/status/history"));
    } catch (e) {
      if (e instanceof ApiError && e.status === 404) { history = null; text($("chart-desc"), "This daemon keeps no history."); return; }
      throw e;
    }
    drawChart();
  }
  const reloadHistory = throttled(loadHistory);

  const SVG = "http://www.w3.org/2000/svg";
  function svg(tag, attrs, content) {
    const el = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
    if (content !== undefined) el.textContent = content;
    return el;
  }

  // Two panels over the last hour: queue depth (an area, failed as a
  // line on the same scale) above, sends per minute (bars) below.
  function drawChart() {
    const chart = $("chart");
    const W = Math.max(300, Math.round(chart.clientWidth || 600));
    const H = 180;
    chart.setAttribute("viewBox", "0 0 " + W + " " + H);
    for (const el of [...chart.children]) if (el.tagName !== "title" && el.tagName !== "desc") el.remove();
    const samples = ((history && history.samples) || []).map((s) => ({ ...s, t: Date.parse(s.at) }))
      .filter((s) => !Number.isNaN(s.t) && s.t > Date.now() - 3600_000);
    const interval = (history && history.interval_seconds) || 10;
    const end = Date.now();
    // The last hour, or less while the daemon has run for less (its
    // history starts with it), but never under 5 minutes.
    const oldest = samples.length ? samples[0].t - interval * 1000 : end;
    const span = Math.min(3600_000, Math.max(300_000, end - oldest));
    const begin = end - span;
    const left = 44, right = W - 8;
    const x = (t) => left + ((t - begin) / span) * (right - left);
    const top1 = 8, bot1 = 96, top2 = 116, bot2 = 160;

    const depth = samples.map((s) => s.queued ?? (s.pending || 0));
    const failed = samples.map((s) => s.failed || 0);
    const perMin = samples.map((s) => (s.sent || 0) * 60 / interval);
    const maxDepth = Math.max(1, ...depth, ...failed);
    const maxSends = Math.max(1, ...perMin);
    const y1 = (v) => bot1 - (v / maxDepth) * (bot1 - top1);
    const y2 = (v) => bot2 - (v / maxSends) * (bot2 - top2);

    const g = svg("g", { "aria-hidden": "true" });
    // Axes and scale labels.
    g.append(svg("line", { x1: left, y1: bot1, x2: right, y2: bot1, class: "axis" }));
    g.append(svg("line", { x1: left, y1: bot2, x2: right, y2: bot2, class: "axis" }));
    g.append(svg("text", { x: left - 4, y: top1 + 8, class: "tick end" }, short(maxDepth)));
    g.append(svg("text", { x: left - 4, y: bot1, class: "tick end" }, "0"));
    g.append(svg("text", { x: left - 4, y: top2 + 8, class: "tick end" }, short(maxSends)));
    g.append(svg("text", { x: left - 4, y: bot2, class: "tick end" }, "0"));
    g.append(svg("text", { x: left + 2, y: top1 + 10, class: "panel" }, "queued"));
    g.append(svg("text", { x: left + 2, y: top2 + 10, class: "panel" }, "sends/min"));
    const minutes = (ms) => { const m = ms / 60_000; return (Number.isInteger(m) ? m : m.toFixed(1)) + " min ago"; };
    g.append(svg("text", { x: left, y: H - 4, class: "tick" }, minutes(span)));
    g.append(svg("text", { x: (left + right) / 2, y: H - 4, class: "tick mid" }, minutes(span / 2)));
    g.append(svg("text", { x: right, y: H - 4, class: "tick end" }, "now"));

    if (samples.length > 0) {
      const pts = samples.map((s, i) => x(s.t).toFixed(1) + "," + y1(depth[i]).toFixed(1));
      const area = "M" + x(samples[0].t).toFixed(1) + "," + bot1 + " L" + pts.join(" L") + " L" + x(samples[samples.length - 1].t).toFixed(1) + "," + bot1 + " Z";
      g.append(svg("path", { d: area, class: "depth" }));
      g.append(svg("polyline", { points: samples.map((s, i) => x(s.t).toFixed(1) + "," + y1(failed[i]).toFixed(1)).join(" "), class: "failed" }));
      const bw = Math.max(1, ((right - left) * interval * 1000) / span - 1);
      for (let i = 0; i < samples.length; i++) {
        if (perMin[i] <= 0) continue;
        const yy = y2(perMin[i]);
        g.append(svg("rect", { x: (x(samples[i].t) - bw).toFixed(1), y: yy.toFixed(1), width: bw.toFixed(1), height: (bot2 - yy).toFixed(1), class: "sends" }));
      }
    }
    chart.append(g);

    const sentHour = samples.reduce((n, s) => n + (s.sent || 0), 0);
    const now = depth.length ? depth[depth.length - 1] : 0;
    text($("chart-desc"), samples.length === 0 ? "No samples yet." :
      "Not yet sent: " + num(now) + " now, at most " + num(Math.max(...depth)) + " in the last hour. " +
      num(sentHour) + " operations sent in the last hour, at most " + num(Math.round(Math.max(...perMin))) + " a minute.");
  }

  function short(n) {
    n = Math.round(n);
    if (n >= 1e6) return (n / 1e6).toFixed(1) + "M";
    if (n >= 1e4) return Math.round(n / 1e3) + "k";
    return String(n);
  }

  if (typeof ResizeObserver === "function") {
    let last = 0;
    new ResizeObserver(() => {
      const w = $("chart").clientWidth;
      if (w && Math.abs(w - last) > 4) { last = w; if (history) drawChart(); }
    }).observe($("chart"));
  }

  // ---- the event stream -------------------------------------------------

  function connect() {
    if (!signedIn) return;
    const url = new URL(eventsURL, location.href);
    url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
    // The first time, from a few events back: the feed shows what
    // happened just before the page opened (those events are shown
    // only: what was read already reflects them).
    url.searchParams.set("since", String(feedSeq ? lastSeq : Math.max(0, lastSeq - FEED_BACKLOG)));
    setLive("connecting", backoff ? "Reconnecting…" : "Connecting…");
    handshakeAt = mono();
    const sock = new WebSocket(url.href);
    ws = sock;
    sock.onopen = () => {
      backoff = 0;
      setLive("on", "Live");
    };
    sock.onmessage = (m) => {
      let e;
      try { e = JSON.parse(m.data); } catch { return; }
      handleEvent(e);
      // For tests and tools: the newest event this page has taken in
      // (what it asked to read for it is already scheduled).
      document.documentElement.dataset.seq = String(feedSeq);
    };
    sock.onclose = (c) => {
      if (ws !== sock) return;
      ws = null;
      if (!signedIn) return;
      // 4401: the daemon ended the stream with the page's session.
      if (c.code === 4401) { signedOut("Your session ended."); return; }
      setLive("off", "Disconnected, reconnecting…");
      backoff = Math.min(10_000, backoff ? backoff * 2 : 500);
      // The handshake keeps the reads' gap too: a stream refused, or
      // dropped as soon as it opened (which ends the backoff), is not
      // asked for again sooner than MIN_RELOAD_GAP after the last time.
      const wait = Math.max(backoff / 2 + Math.random() * backoff / 2, handshakeAt + MIN_RELOAD_GAP - mono());
      reconnectTimer = setTimeout(() => {
        // Whatever changed while the stream was down comes with since;
        // the status is read again (throttled like every reload) for
        // what has no event (pull). Its answer also tells whether the
        // session ended meanwhile (401 signs the page out), which a
        // handshake refused before it opened does not say.
        reloadStatus();
        connect();
      }, wait);
    };
  }

  function handleEvent(e) {
    if (e.type === "resync") {
      // The events after lastSeq are gone: read everything again.
      lastSeq = Math.max(lastSeq, e.seq);
      feedSeq = Math.max(feedSeq, e.seq);
      addEvent(e);
      reloadAll();
      return;
    }
    if (typeof e.seq !== "number") return;
    if (e.seq > feedSeq) {
      feedSeq = e.seq;
      addEvent(e);
    }
    // Already reflected in what was read (the feed's backlog), or a
    // repeat across a reconnect.
    if (e.seq <= lastSeq) return;
    lastSeq = e.seq;
    switch (e.type) {
      case "queue.totals":
        // Newer than the status read last (whose counts are as of its
        // lastEventSeq), or it would undo a fresher answer.
        if (status && e.data && e.seq > countsSeq) {
          countsSeq = e.seq;
          status.counts = e.data.counts || status.counts;
          status.oldestPendingAgeSeconds = e.data.oldestPendingAgeSeconds || 0;
          if (e.data.accountCounts) status.accountCounts = e.data.accountCounts;
          status.accountOldestPendingAgeSeconds = e.data.accountOldestPendingAgeSeconds || 0;
          statusAt = mono();
          renderStatus();
        }
        break;
      case "operation.state":
        // The counts: queue.totals brings them at most once a second;
        // a daemon that sends none is read again, as often.
        reloadStatus();
        if (e.state === "permanent_failed" || failedShown.has(e.operationId)) reloadFailed();
        if (blockedShown.has(e.operationId) || e.blockedBy) reloadBlocked();
        break;
      case "operation.purged":
        reloadStatus();
        if (failedShown.has(e.operationId)) reloadFailed();
        if (blockedShown.has(e.operationId)) reloadBlocked();
        break;
      case "entity.changed":
      case "entity.removed":
        if (e.syncState === "conflict") conflictTypes.add(e.entityType);
        if (e.syncState === "conflict" || conflictShown.has(e.entityType + "/" + e.entityId)) reloadFailed();
        break;
      case "session.changed":
      case "session.logged_out":
      case "account.purged":
        reloadAll();
        break;
      case "session.refresh_needed":
      case "connectivity.changed":
      case "remote.misconfigured":
      case "remote.restored":
        reloadStatus();
        break;
    }
  }

  function reloadAll() {
    reloadStatus();
    reloadFailed();
    reloadBlocked();
    reloadApps();
    reloadHistory();
  }

  function addEvent(e) {
    const list = $("event-list");
    const li = h("li", "event");
    const time = h("time", "muted", e.time ? new Date(e.time).toLocaleTimeString("en-GB") : "");
    if (e.time) time.dateTime = e.time;
    li.append(time, " ", h("strong", "", e.type), " ", h("span", "", describe(e)));
    li.dataset.type = e.type;
    list.prepend(li);
    while (list.children.length > MAX_EVENTS) list.lastElementChild.remove();
  }

  function describe(e) {
    const what = e.entityType ? e.entityType + "/" + e.entityId : "";
    switch (e.type) {
      case "entity.changed": return what + " → " + e.syncState + (e.data && e.data.origin === "remote" ? " (from the server)" : "");
      case "entity.removed": return what;
      case "operation.state": return what + " " + e.state + (e.errorCode ? " (" + e.errorCode + ")" : "");
      case "operation.purged": return what;
      case "queue.totals": {
        const c = (e.data && (e.data.accountCounts || e.data.counts)) || {};
        return WAITING.reduce((n, k) => n + (c[k] || 0), 0) + " waiting, " + (c.permanent_failed || 0) + " failed";
      }
      case "connectivity.changed": return e.data && e.data.online ? "online" : "offline";
      case "session.changed": return "signed in as " + (e.accountId || "");
      case "session.logged_out": return e.accountId || "";
      case "session.refresh_needed": return (e.data && e.data.reason) || "";
      case "remote.misconfigured": return (e.data && e.data.kind) || "";
      case "resync": return "events were missed: everything was read again";
      default: return what;
    }
  }

  start();
})();
