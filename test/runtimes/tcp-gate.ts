// Test helper: a loopback TCP port in front of a server that can be shut (listener closed, every open
// connection cut) and opened again: a database that goes down and comes back, as a pooler sees it; or
// frozen: connections stay open but no byte passes any more (a host that stopped answering).
import { createServer, connect as tcpConnect, type Server, type Socket } from "node:net";
import { freePort } from "../../src/runtime/embedded-postgres.ts";

/** A gate in front of `url`'s server: `url` goes through it; `shut()` and `open()` resolve when done. */
export interface TcpGate {
  url: string;
  open(): Promise<void>;
  shut(): Promise<void>;
  /** From now on drops every byte either way, keeping connections open: a query sent then never returns. */
  freeze(): void;
  /** As {@link freeze}, for the connections open now only: connections opened later pass (one host half-open, the next reachable). */
  freezeOpen(): void;
}

/** A gate on a free port in front of the server of `url` (same credentials and database), shut at first. */
export async function tcpGate(url: string): Promise<TcpGate> {
  const target = new URL(url);
  const port = await freePort();
  const sockets = new Set<Socket>();
  let server: Server | undefined;
  let frozen = false;
  const frozenSockets = new WeakSet<Socket>();
  const forward = (client: Socket) => {
    const upstream = tcpConnect(Number(target.port), target.hostname);
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on("error", () => (client.destroy(), upstream.destroy()));
      s.on("close", () => (sockets.delete(s), client.destroy(), upstream.destroy()));
    }
    client.on("data", (chunk) => frozen || frozenSockets.has(client) || upstream.write(chunk));
    upstream.on("data", (chunk) => frozen || frozenSockets.has(client) || client.write(chunk));
  };
  return {
    url: Object.assign(new URL(url), { port: String(port) }).toString(),
    open: () => new Promise<void>((resolve) => (server = createServer(forward)).listen(port, "127.0.0.1", () => resolve())),
    shut: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server ? server.close(() => resolve()) : resolve();
        server = undefined;
      }),
    freeze: () => void (frozen = true),
    freezeOpen: () => {
      for (const s of sockets) frozenSockets.add(s);
    },
  };
}
