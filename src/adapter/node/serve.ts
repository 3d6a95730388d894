// Entry file for Node.js 20: `bun run build:node && node dist/node/serve.mjs` (a bundle, since Node 20
// cannot load TypeScript). node:http serves the core fetch through @remix-run/node-fetch-server.
import { createServer } from "node:http";
import { createRequestListener } from "@remix-run/node-fetch-server";
import { serveReceiver } from "../../runtime/serve-receiver.ts";
import { onStopSignals } from "../../runtime/signals.ts";
import { SERVE_USAGE, takeNoArguments } from "../../runtime/command-args.ts";

takeNoArguments("serve", SERVE_USAGE, process.argv.slice(2));

await serveReceiver({
  name: "Node.js",
  version: `Node.js ${process.version}`,
  application: "webhook-inbox node",
  env: process.env,
  exit: (code) => process.exit(code),
  listen(config, fetch) {
    const server = createServer(createRequestListener(fetch));
    const base = new Promise<string>((resolve) => {
      server.listen(config.port, config.host, () => {
        const address = server.address();
        resolve(`http://${config.host}:${typeof address === "object" && address ? address.port : config.port}`);
      });
    });
    // close() stops accepting, closes idle keep-alive connections and resolves when the busy ones finish.
    return { base, close: () => new Promise<void>((resolve) => server.close(() => resolve())) };
  },
  // A repeated SIGTERM is ignored; a second Ctrl-C (not the duplicate of `bun run`) exits at once.
  onStop: (stop) => onStopSignals(stop, () => process.exit(1)),
});
