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
import { ADMIN_TOKEN, deliverLifecycle, parkRow, seedLastHour, startAdminServer, stateOf, type AdminServer } from "./admin-server.ts";

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

      test(
        "`GET /admin` in Chromium answers 401 without credentials and shows the overview with them",
        async () => {
          const anonymous = await browser!.newPage();
          // Headless Chromium cancels the sign-in prompt, so the navigation fails; the answer is still seen.
          const answer = anonymous.waitForResponse((r) => r.url() === `${server.url}/admin`);
          await anonymous.goto(`${server.url}/admin`).catch(() => {});
          const refused = await answer;
          expect(refused.status()).toBe(401);
          expect(refused.headers()["www-authenticate"]).toBe('Basic realm="webhook-inbox admin"');
          await anonymous.close();
          const page = await signedIn();
          const response = await page.goto(`${server.url}/admin`);
          expect(response?.status()).toBe(200);
          expect(await page.$eval("h1", (e) => e.textContent)).toBe("Overview");
          expect(await page.$$eval("svg.chart rect", (r) => r.length)).toBeGreaterThan(60);
          const png = await page.screenshot({ type: "png" });
          expect([...png.subarray(1, 4)].map((c) => String.fromCharCode(c)).join("")).toBe("PNG");
          if (process.env.UPDATE_SCREENSHOT === "1") await writeFile(SCREENSHOT, png);
          await page.close();
        },
        TIMEOUT,
      );

      test(
        "an operator finds a needs-review row, requeues it, and sees it processed",
        async () => {
          await parkRow(server.db, "evt_browser_review", { receivedAgoSec: 5 });
          const page = await signedIn();
          await page.goto(`${server.url}/admin/events?state=needs_review&type=invoice.created`);
          expect(await page.$$eval("table.events tbody tr td:nth-child(5)", (cells) => cells.map((c) => c.textContent))).toContain(
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
