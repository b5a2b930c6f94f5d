// The renderer of a notes app (an Electron or Tauri window), in plain
// JavaScript with the built client as an ES module: a live list with each
// note's sync state, add, edit (click a note), and the daemon's state.

import { createClient } from "/client/index.js";

const config = await (await fetch("/config.json")).json(); // in Electron: from the preload script
const client = createClient({ addr: config.addr, token: config.token });

const $ = (sel) => document.querySelector(sel);
let selected = "";

// The list, now and after every change (a local write, a pulled change,
// a delete, a conflict, a resync), each note with its syncState.
client.live("note", {
  orderBy: "title",
  onChange: ({ items }) => {
    $("#notes").replaceChildren(
      ...items.map((n) => {
        const li = document.createElement("li");
        li.dataset.id = n.id;
        li.dataset.state = n.syncState;
        li.setAttribute("aria-selected", String(n.id === selected));
        const title = document.createElement("span");
        title.className = "title";
        title.textContent = n.data?.title ?? "";
        const state = document.createElement("span");
        state.className = "state";
        state.textContent = n.syncState;
        li.append(title, state);
        li.onclick = () => select(n);
        return li;
      }),
    );
  },
  onError: (err) => ($("#status").textContent = `stopped: ${err.message}`),
});

// The daemon's state: online, offline, paused, unreachable, and what waits.
client.watchStatus({
  onChange: (s) => {
    const el = $("#status");
    el.dataset.state = s.state ?? "";
    const waiting = s.counts.pending + s.counts.sending + s.counts.retry_waiting;
    el.textContent =
      s.state === "unreachable" ? "syncd is not answering" : `${s.state}${s.state === "paused" ? ` (${s.status?.pauseReason})` : ""}, ${waiting} to send`;
  },
});

// A write's error (a SyncdError: code, message) is shown, not thrown away.
const shown = (write) => write.then(() => ($("#error").textContent = ""), (err) => ($("#error").textContent = `${err.code}: ${err.message}`));

$("#add").onsubmit = (ev) => {
  ev.preventDefault();
  const input = $("#new-title");
  void shown(client.create("note", { title: input.value }).then(() => (input.value = "")));
};

function select(n) {
  selected = n.id;
  for (const li of document.querySelectorAll("#notes li")) li.setAttribute("aria-selected", String(li.dataset.id === n.id));
  $("#edit").hidden = false;
  $("#edit-title").value = n.data?.title ?? "";
  $("#edit-title").focus();
}

$("#edit").onsubmit = (ev) => {
  ev.preventDefault();
  void shown(client.update("note", selected, { title: $("#edit-title").value }).then(() => ($("#edit").hidden = true)));
};
