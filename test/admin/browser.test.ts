// The operator's page in a real browser: headless Chromium (Debian's `chromium`) driven by
// puppeteer-core against a real receiver and PostgreSQL. Without Chromium these tests are one skip
// saying how to install it; in CI (`.ci/run` installs it and sets REQUIRE_CHROMIUM=1) that is a failure.
// With UPDATE_SCREENSHOT=1 (`bun run admin:screenshot`) the overview's screenshot is written to docs/.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import puppeteer, { type Browser, type Page } from "puppeteer-core";
import { requireBinary } from "../support/support-binary.ts";
import { runDispatcher } from "../../src/outbox/dispatcher.ts";
import { readHeartbeats } from "../../src/loop/heartbeat.ts";
import { runWorker } from "../../src/worker/worker.ts";
import { waitUntil } from "../support/wait-until.ts";
import {
  ADMIN_TOKEN,
  deliverLifecycle,
  heartbeatRow,
  parkRow,
  seedLastHour,
  seedThirtyDays,
  startAdminServer,
  stateOf,
  type AdminServer,
} from "./admin-server.ts";

/** Bound of each browser test, ms (a loaded machine starts Chromium slowly); not a speed assertion. */
const TIMEOUT = 60_000;

const SCREENSHOT = join(import.meta.dir, "..", "..", "docs", "admin-overview.png");

requireBinary(
  "chromium",
  "apt-get install -y chromium",
  (chromium) => {
    describe("the operator's page in Chromium", () => {
      let server: AdminServer;
      let readonlyServer: AdminServer;
      let browser: Browser | undefined;
      let profile: string | undefined;
      const dialogs: string[] = [];

      beforeAll(async () => {
        server = await startAdminServer();
        readonlyServer = await startAdminServer({ readonly: true });
        await deliverLifecycle(server);
        await seedLastHour(server.db);
        await seedThirtyDays(server.db);
        profile = await mkdtemp(join(tmpdir(), "webhook-inbox-chromium-"));
        browser = await puppeteer.launch({
          executablePath: chromium,
          headless: false, // the mode comes from --headless=new below
          args: ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", `--user-data-dir=${profile}`],
          defaultViewport: { width: 1200, height: 800 },
        });
      }, 120_000);

      afterAll(async () => {
        const process = browser?.process();
        await browser?.close().catch(() => {});
        if (process && process.exitCode === null) process.kill("SIGKILL");
        if (profile) await rm(profile, { recursive: true, force: true });
        await server?.stop();
        await readonlyServer?.stop();
      }, 60_000);

      /** A tab signed in with the admin token (HTTP Basic), recording any dialog a script would open. */
      async function signedIn(): Promise<Page> {
        const page = await browser!.newPage();
        page.on("dialog", async (d) => {
          dialogs.push(d.message());
          await d.dismiss();
        });
        await page.authenticate({ username: "operator", password: ADMIN_TOKEN });
        return page;
      }

      /** Clicks `selector` and waits for the page it submits or follows to load; returns its status. */
      async function clickAndLoad(page: Page, selector: string): Promise<number> {
        const [response] = await Promise.all([page.waitForNavigation(), page.click(selector)]);
        return response?.status() ?? 0;
      }

      /**
       * A worker and a dispatcher beating their rows in this process (heartbeat every 500 ms): the worker
       * has no handler table, so it claims nothing; the dispatcher's sink accepts every message.
       */
      function startLoops(): { stop(): Promise<void> } {
        const stop = new AbortController();
        const options = { db: server.db, signal: stop.signal, pollMs: 100, listen: false, log: () => {} };
        const loops = [
          runWorker({ ...options, tables: {}, heartbeat: { host: "worker-1", pid: 101, everyMs: 500, detail: "4 slot(s), batch 32" } }),
          runDispatcher({
            ...options,
            send: async () => {},
            heartbeat: { host: "dispatcher-1", pid: 102, everyMs: 500, detail: "sink https://ledger.internal, 4 slot(s)" },
          }),
        ];
        return {
          async stop() {
            stop.abort();
            await Promise.all(loops);
          },
        };
      }

      test(
        "`GET /admin` in Chromium answers 401 without credentials and shows the overview with them: live workers and dispatchers, 30 days per endpoint",
        async () => {
          const anonymous = await browser!.newPage();
          // Headless Chromium cancels the sign-in prompt, so the navigation fails; the answer is still seen.
          const answer = anonymous.waitForResponse((r) => r.url() === `${server.url}/admin`);
          await anonymous.goto(`${server.url}/admin`).catch(() => {});
          const refused = await answer;
          expect(refused.status()).toBe(401);
          expect(refused.headers()["www-authenticate"]).toBe('Basic realm="webhook-inbox admin"');
          await anonymous.close();
          const loops = startLoops();
          try {
            // Alive, and the dispatcher has delivered the lifecycle's outbox messages and said so in a beat.
            await waitUntil("both heartbeats, the dispatcher's with its claims", async () => {
              const rows = await readHeartbeats(server.db);
              return rows.filter((p) => p.state === "alive").length === 2 && rows.some((p) => p.kind === "dispatcher" && p.claimed > 0);
            });
            const page = await signedIn();
            const response = await page.goto(`${server.url}/admin`);
            expect(response?.status()).toBe(200);
            expect(await page.$eval("h1", (e) => e.textContent)).toBe("Overview");
            expect(await page.$$eval("svg.chart rect", (r) => r.length)).toBeGreaterThan(60);
            const processes = await page.$$eval("table.processes tbody tr", (rows) =>
              rows.map((r) => [...r.querySelectorAll("td")].slice(0, 3).map((c) => c.textContent)),
            );
            expect(processes).toEqual([
              ["worker", "alive", "worker-1"],
              ["dispatcher", "alive", "dispatcher-1"],
            ]);
            expect(await page.$eval("table.processes tr.alive:nth-child(2) td:nth-child(8)", (c) => c.textContent)).toBe("2");
            // Billing's 30 days: five charts of 30 bars each, drawn (laid out with a size), the backlog of day 20 among them.
            const charts = await page.$$eval("section.endpoint figure.day-chart", (figures) =>
              figures.slice(0, 5).map((f) => ({
                caption: f.querySelector("figcaption")?.textContent,
                bars: f.querySelectorAll("rect").length,
                drawn: [...f.querySelectorAll("rect")].filter((r) => r.getBoundingClientRect().height > 0).length,
                width: f.querySelector("svg")!.getBoundingClientRect().width,
              })),
            );
            expect(charts.map((c) => c.caption)).toEqual([
              "received",
              "failed at least once",
              "needs review (parked or resolved)",
              "backlog (peak unsettled)",
              "latency (worst hour's p95)",
            ]);
            for (const c of charts) {
              expect(c.bars).toBe(30);
              expect(c.width).toBe(240);
            }
            expect(charts[0]!.drawn).toBeGreaterThanOrEqual(29); // every seeded day (today too: the last hour's rows)
            expect(charts[4]!.drawn).toBeGreaterThan(0);
            const day20 = new Date(Date.now() - 9 * 86_400_000).toISOString().slice(0, 10);
            expect(await page.$$eval("figure.day-chart.series-latency title", (t) => t.map((x) => x.textContent))).toContain(
              `${day20}: p95 5.0 h (worst hour), max 5.0 h`,
            );
            const png = await page.screenshot({ type: "png" });
            expect([...png.subarray(1, 4)].map((c) => String.fromCharCode(c)).join("")).toBe("PNG");
            if (process.env.UPDATE_SCREENSHOT === "1") await writeFile(SCREENSHOT, png);
            await page.close();
          } finally {
            await loops.stop();
          }
        },
        TIMEOUT,
      );

      test(
        "the overview in Chromium tells a stopped worker from a killed one, and warns when rows wait with no worker alive",
        async () => {
          await server.db`delete from loop_heartbeats`;
          const loops = startLoops();
          await waitUntil("both heartbeats", async () => (await readHeartbeats(server.db)).filter((p) => p.state === "alive").length === 2);
          await loops.stop(); // a clean stop: both rows say stopped
          await heartbeatRow(server.db, "worker", "killed-host", 120, "4 slot(s), batch 32"); // a SIGKILLed one: no beat for 2 min
          await parkRow(server.db, "evt_browser_waiting", { attempts: 0 });
          await server.db`update webhook_inbox set needs_review_at = null where event_id = 'evt_browser_waiting'`;
          const page = await signedIn();
          await page.goto(`${server.url}/admin`);
          const rows = await page.$$eval("table.processes tbody tr", (trs) =>
            trs.map((r) => ({ state: r.className, cells: [...r.querySelectorAll("td")].slice(0, 3).map((c) => c.textContent) })),
          );
          expect(rows).toContainEqual({ state: "dead", cells: ["worker", "dead", "killed-host"] });
          expect(rows).toContainEqual({ state: "stopped", cells: ["worker", "stopped", "worker-1"] });
          expect(rows).toContainEqual({ state: "stopped", cells: ["dispatcher", "stopped", "dispatcher-1"] });
          expect(await page.$eval("p.no-worker", (p) => p.textContent)).toMatch(/^No worker is alive: \d+ row\(s\) wait for one/);
          await page.close();
          await server.db`delete from webhook_inbox where event_id = 'evt_browser_waiting'`;
        },
        TIMEOUT,
      );

      test(
        "an operator finds a needs-review row, requeues it, and sees it processed",
        async () => {
          await parkRow(server.db, "evt_browser_review", { receivedAgoSec: 5 });
          const page = await signedIn();
          await page.goto(`${server.url}/admin/events?state=needs_review&type=invoice.created`);
          expect(await page.$$eval("table.events tbody tr td:nth-child(6)", (cells) => cells.map((c) => c.textContent))).toContain(
            "needs_review",
          );
          expect(await clickAndLoad(page, `a[href="/admin/events/evt_browser_review"]`)).toBe(200);
          expect(await page.$eval(".state", (e) => e.textContent)).toBe("needs_review");
          expect(await clickAndLoad(page, `form[action$="/requeue"] button`)).toBe(200);
          expect(await page.$eval("p.ok", (e) => e.textContent)).toContain("Requeued evt_browser_review");
          await server.work(async () => (await stateOf(server.db, "evt_browser_review")) === "processed");
          await page.goto(`${server.url}/admin/events/evt_browser_review`);
          expect(await page.$eval(".state", (e) => e.textContent)).toBe("processed");
          await page.close();
        },
        TIMEOUT,
      );

      test(
        "a bulk requeue states its filter and exact count, then requeues exactly those rows",
        async () => {
          for (const id of ["evt_browser_bulk_1", "evt_browser_bulk_2", "evt_browser_bulk_3"])
            await parkRow(server.db, id, { type: "invoice.bulk", attempts: 10 });
          await parkRow(server.db, "evt_browser_bulk_few", { type: "invoice.bulk", attempts: 2 });
          const page = await signedIn();
          await page.goto(`${server.url}/admin/events?state=needs_review&type=invoice.bulk&attempts=5`);
          expect(await page.$$eval("table.events tbody tr", (r) => r.length)).toBe(3);
          expect(await clickAndLoad(page, `a[href^="/admin/bulk?"][href$="action=requeue"]`)).toBe(200);
          expect(await page.$eval("strong.filter", (e) => e.textContent)).toBe("state needs_review, type invoice.bulk, attempts ≥ 5");
          expect(await page.$eval("strong.count", (e) => e.textContent)).toBe("3");
          expect(await clickAndLoad(page, `form[action="/admin/bulk"] button`)).toBe(200);
          expect(await page.$eval("strong.count", (e) => e.textContent)).toBe("3");
          expect(await stateOf(server.db, "evt_browser_bulk_1")).toBe("unprocessed");
          expect(await stateOf(server.db, "evt_browser_bulk_3")).toBe("unprocessed");
          expect(await stateOf(server.db, "evt_browser_bulk_few")).toBe("needs_review");
          await page.close();
        },
        TIMEOUT,
      );

      test(
        "a form without its CSRF token is refused 403 and changes nothing",
        async () => {
          await parkRow(server.db, "evt_browser_csrf");
          const page = await signedIn();
          await page.goto(`${server.url}/admin/events/evt_browser_csrf`);
          await page.$$eval(`form[action$="/requeue"] input[name^="csrf_"]`, (inputs) => inputs.forEach((i) => i.remove()));
          expect(await clickAndLoad(page, `form[action$="/requeue"] button`)).toBe(403);
          expect(await page.evaluate(() => document.body.textContent)).toContain("CSRF");
          expect(await stateOf(server.db, "evt_browser_csrf")).toBe("needs_review");
          await page.close();
        },
        TIMEOUT,
      );

      test(
        "read-only shows no action and refuses a POST the browser sends anyway",
        async () => {
          await parkRow(readonlyServer.db, "evt_browser_ro");
          const page = await signedIn();
          await page.goto(`${readonlyServer.url}/admin/events/evt_browser_ro`);
          expect(await page.$$("form[method=post]")).toHaveLength(0);
          expect(await page.$eval(".badge", (e) => e.textContent)).toBe("read-only");
          await page.evaluate(() => {
            const form = document.createElement("form");
            form.method = "post";
            form.action = "/admin/events/evt_browser_ro/requeue";
            form.innerHTML = `<input name="provider" value="stripe"><input name="endpoint" value="billing"><button id="forced">go</button>`;
            document.body.append(form);
          });
          expect(await clickAndLoad(page, "#forced")).toBe(403);
          expect(await stateOf(readonlyServer.db, "evt_browser_ro")).toBe("needs_review");
          await page.close();
        },
        TIMEOUT,
      );

      test(
        "an event type holding markup renders as text and runs nothing",
        async () => {
          const type = "<img src=x onerror=alert(1)>";
          await parkRow(server.db, "evt_browser_xss", { type });
          const page = await signedIn();
          for (const path of ["/admin/events?id=evt_browser_xss", "/admin/events/evt_browser_xss"]) {
            await page.goto(`${server.url}${path}`);
            expect(await page.$$("main img")).toHaveLength(0);
            expect(await page.evaluate(() => document.querySelector("main")?.textContent ?? "")).toContain(type);
          }
          expect(await page.$eval(".event-type", (e) => e.textContent)).toBe(type);
          expect(dialogs).toEqual([]);
          await page.close();
        },
        TIMEOUT,
      );
    });
  },
  { candidates: ["/usr/bin/chromium"] },
);
