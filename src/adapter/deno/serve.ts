// Entry file for Deno 2: `deno run --allow-net --allow-env --allow-read --allow-sys src/adapter/deno/serve.ts`.
// npm packages come from node_modules (bun install), so Deno needs no registry of its own.
import { serveReceiver } from "../../runtime/serve-receiver.ts";

/** The part of the Deno namespace this file uses (the project typechecks with bun-types). */
declare const Deno: {
  env: { toObject(): Record<string, string> };
  serve(
    options: { hostname: string; port: number; onListen(addr: { hostname: string; port: number }): void },
    handler: (request: Request) => Promise<Response>,
  ): { shutdown(): Promise<void> };
  addSignalListener(signal: "SIGTERM" | "SIGINT", handler: () => void): void;
  exit(code: number): never;
};

await serveReceiver({
  name: "Deno",
  application: "webhook-inbox deno",
  env: Deno.env.toObject(),
  exit: (code) => Deno.exit(code),
  listen(config, fetch) {
    let listening: (base: string) => void = () => {};
    const base = new Promise<string>((resolve) => (listening = resolve));
    const onListen = ({ hostname, port }: { hostname: string; port: number }) => listening(`http://${hostname}:${port}`);
    const server = Deno.serve({ hostname: config.host, port: config.port, onListen }, fetch);
    return { base, close: () => server.shutdown() };
  },
  onStop(stop) {
    let stopped = false;
    const once = (signal: string) => {
      if (stopped) Deno.exit(1); // second signal: exit at once
      stopped = true;
      stop(signal);
    };
    Deno.addSignalListener("SIGTERM", () => once("SIGTERM"));
    Deno.addSignalListener("SIGINT", () => once("SIGINT"));
  },
});
