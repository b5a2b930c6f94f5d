// Serves the renderer page (examples/renderer) the way an Electron or
// Tauri window would load it: the page, the built client as ES modules
// under /client/, and /config.json with the daemon's address and the
// app's token (in Electron the preload script would hand these over).
// Loopback only.
//
//   node dist/examples/serve.js --addr 127.0.0.1:7419 --token APP_TOKEN [--port 5173]
//
// syncd must allow the page's origin: `syncd run --allowed-origin
// http://127.0.0.1:5173`; the token is an app token: `syncd apps add
// notes --types note`.

import { readFile } from "node:fs/promises";
import { createServer } from "node:http";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";

const { values } = parseArgs({
  options: { addr: { type: "string", default: "127.0.0.1:7419" }, token: { type: "string" }, port: { type: "string", default: "5173" } },
});
const token = values.token ?? process.env.SYNCD_TOKEN;
if (!token) {
  console.error("serve: an app token is needed: --token (syncd apps add notes --types note)");
  process.exit(2);
}

const here = dirname(fileURLToPath(import.meta.url)); // dist/examples
const pkg = join(here, "..", "..");
const files: Record<string, [string, string]> = {
  "/": [join(pkg, "examples", "renderer", "index.html"), "text/html; charset=utf-8"],
  "/app.js": [join(pkg, "examples", "renderer", "app.js"), "text/javascript"],
};

const server = createServer((req, res) => {
  const url = req.url ?? "/";
  if (req.method !== "GET") {
    res.writeHead(405).end();
    return;
  }
  if (url === "/config.json") {
    res.writeHead(200, { "Content-Type": "application/json", "Cache-Control": "no-store" });
    res.end(JSON.stringify({ addr: values.addr, token }));
    return;
  }
  let file = files[url];
  // The client as built (dist/src/*.js): the page imports /client/index.js.
  const m = /^\/client\/([a-z]+\.js)$/.exec(url);
  if (m) file = [join(pkg, "dist", "src", m[1]!), "text/javascript"];
  if (!file) {
    res.writeHead(404).end();
    return;
  }
  readFile(file[0]).then(
    (body) => res.writeHead(200, { "Content-Type": file[1] }).end(body),
    () => res.writeHead(404).end(),
  );
});

server.listen(Number(values.port), "127.0.0.1", () => {
  const a = server.address();
  const port = typeof a === "object" && a ? a.port : values.port;
  console.log(`serving the notes page on http://127.0.0.1:${port}/ (syncd needs --allowed-origin http://127.0.0.1:${port})`);
});
const stop = () => server.close();
process.once("SIGINT", stop);
process.once("SIGTERM", stop);
