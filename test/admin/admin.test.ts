// The operator's page through HTTP on a real receiver and PostgreSQL, without a browser: credentials,
// headers, CSRF, read-only, escaping, the bulk confirmation's exactness.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { eventBody, invoice, lifecycle } from "../support/helpers.ts";
import { insertInbox } from "../../src/inbox/inbox.ts";
import { inboxRowFor } from "../support/helpers.ts";
import {
  ADMIN_TOKEN,
  basic,
  deliverLifecycle,
  heartbeatRow,
  parkRow,
  seedThirtyDays,
  startAdminServer,
  stateOf,
  type AdminServer,
} from "./admin-server.ts";

let server: AdminServer;
let readonlyServer: AdminServer;

beforeAll(async () => {
  // A GitHub endpoint beside Stripe's billing: a provider without modes.
  server = await startAdminServer({ env: { WEBHOOK_ENDPOINTS: "github/repos", WEBHOOK_SECRET_GITHUB_REPOS: "github-secret-0123456789" } });
  readonlyServer = await startAdminServer({ readonly: true });
  await deliverLifecycle(server);
});

afterAll(async () => {
  await server?.stop();
  await readonlyServer?.stop();
});

const get = (path: string, auth: string | null = basic(), s = server) =>
  fetch(`${s.url}${path}`, { headers: auth ? { authorization: auth } : {} });

/** The hidden CSRF fields of the first form on `path`'s page. */
async function csrfOf(path: string): Promise<{ csrf_nonce: string; csrf_token: string }> {
  const text = await (await get(path)).text();
  const nonce = /name="csrf_nonce"\s+value="([^"]+)"/.exec(text)?.[1];
  const token = /name="csrf_token"\s+value="([^"]+)"/.exec(text)?.[1];
  if (!nonce || !token) throw new Error(`No CSRF fields on ${path}`);
  return { csrf_nonce: nonce, csrf_token: token };
}

const post = (path: string, fields: Record<string, string>, headers: Record<string, string> = {}, s = server) =>
  fetch(`${s.url}${path}`, {
    method: "POST",
    headers: { authorization: basic(), origin: s.url, "sec-fetch-site": "same-origin", ...headers },
    body: new URLSearchParams(fields),
  });

describe("createAdmin()", () => {
  test("`createAdmin()` answers 401 with only the Basic challenge to a missing, wrong or short token", async () => {
    for (const auth of [null, basic("x".repeat(40)), `Bearer ${ADMIN_TOKEN.slice(0, -1)}`, "Basic !!!", basic(`${ADMIN_TOKEN}x`)]) {
      const response = await get("/admin/events", auth);
      expect(response.status).toBe(401);
      expect(response.headers.get("www-authenticate")).toBe('Basic realm="webhook-inbox admin"');
      expect(await response.text()).toBe("Unauthorized\n");
    }
  });

  test("`createAdmin()` serves every page with the security headers to Basic and Bearer credentials", async () => {
    for (const auth of [basic(), `Bearer ${ADMIN_TOKEN}`]) {
      for (const path of ["/admin", "/admin/events", "/admin/events/evt_1SkB1aLgUG5tbmjc0created", "/admin/admin.css"]) {
        const response = await get(path, auth);
        expect(response.status, path).toBe(200);
        expect(response.headers.get("content-security-policy")).toContain("default-src 'none'");
        expect(response.headers.get("content-security-policy")).toContain("frame-ancestors 'none'");
        expect(response.headers.get("x-frame-options")).toBe("DENY");
        expect(response.headers.get("cache-control")).toBe("no-store");
        expect(response.headers.get("referrer-policy")).toBe("same-origin");
        await response.text();
      }
    }
  });

  test("`createAdmin()` is off without ADMIN_TOKEN: /admin is the receiver's 404", async () => {
    const { receiverApp } = await import("../../src/runtime/receiver.ts");
    const { loadConfig } = await import("../../src/config.ts");
    const app = receiverApp(loadConfig({ STRIPE_WEBHOOK_SECRET: "whsec_test_0123456789abcdefghijklmnop" }), server.db, { log: () => {} });
    const response = await app.fetch(new Request("http://x/admin", { headers: { authorization: basic() } }));
    expect(response.status).toBe(404);
    expect(((await response.json()) as { error: string }).error).toBe("not_found");
  });

  test("`createAdmin()` refuses a POST without a CSRF token, with a forged one, or from another site (403), and changes nothing", async () => {
    await parkRow(server.db, "evt_csrf_1");
    const path = "/admin/events/evt_csrf_1/requeue";
    const key = { provider: "stripe", endpoint: "billing" };
    const good = await csrfOf("/admin/events/evt_csrf_1");
    const answers = [
      await post(path, key),
      await post(path, { ...key, csrf_nonce: good.csrf_nonce, csrf_token: "0".repeat(64) }),
      await post(path, { ...key, ...good }, { origin: "http://evil.example", "sec-fetch-site": "cross-site" }),
      await post(path, { ...key, ...good }, { "sec-fetch-site": "same-site" }),
    ];
    for (const response of answers) {
      expect(response.status).toBe(403);
      await response.text();
    }
    expect(await stateOf(server.db, "evt_csrf_1")).toBe("needs_review");
    const done = await post(path, { ...key, ...good });
    expect(done.status).toBe(200);
    expect(await stateOf(server.db, "evt_csrf_1")).toBe("unprocessed");
  });

  test("`createAdmin()` read-only shows no action and refuses every POST with 403", async () => {
    await parkRow(readonlyServer.db, "evt_ro_1");
    const pageText = await (await get("/admin/events/evt_ro_1", basic(), readonlyServer)).text();
    expect(pageText).not.toMatch(/<form[^>]*method="post"/);
    expect(pageText).toContain("read-only");
    for (const path of ["/admin/events/evt_ro_1/requeue", "/admin/events/evt_ro_1/resolve", "/admin/bulk"]) {
      const response = await post(path, { provider: "stripe", endpoint: "billing", note: "x" }, {}, readonlyServer);
      expect(response.status).toBe(403);
      await response.text();
    }
    expect((await get("/admin/bulk?action=requeue&state=needs_review", basic(), readonlyServer)).status).toBe(403);
    expect(await stateOf(readonlyServer.db, "evt_ro_1")).toBe("needs_review");
  });

  test("`createAdmin()` shows an event type holding markup as text", async () => {
    const type = `<img src=x onerror=alert(1)>`;
    await parkRow(server.db, "evt_xss_1", { type });
    for (const path of ["/admin/events/evt_xss_1", "/admin/events?id=evt_xss_1"]) {
      const text = await (await get(path)).text();
      expect(text).not.toContain("<img");
      expect(text).toContain("&lt;img src=x onerror=alert(1)&gt;");
    }
  });

  test("`createAdmin()` applies a confirmed bulk requeue to exactly the confirmed rows, and to none when the set changed", async () => {
    await parkRow(server.db, "evt_bulk_1", { type: "invoice.bulk" });
    await parkRow(server.db, "evt_bulk_2", { type: "invoice.bulk" });
    const confirm = await (await get("/admin/bulk?action=requeue&type=invoice.bulk")).text();
    expect(confirm).toMatch(/<strong class="count">2<\/strong>/);
    const fields = Object.fromEntries(
      [...confirm.matchAll(/<input\s+type="hidden"\s+name="([^"]+)"\s+value="([^"]*)"\s*\/?>/g)].map((m) => [m[1]!, m[2]!]),
    );
    expect(fields.count).toBe("2");
    await parkRow(server.db, "evt_bulk_3", { type: "invoice.bulk" });
    const refused = await post("/admin/bulk", fields);
    expect(refused.status).toBe(409);
    expect(await refused.text()).toContain("2 then, 3 now");
    expect([await stateOf(server.db, "evt_bulk_1"), await stateOf(server.db, "evt_bulk_3")]).toEqual(["needs_review", "needs_review"]);
    const again = await (await get("/admin/bulk?action=requeue&type=invoice.bulk")).text();
    const fields3 = Object.fromEntries(
      [...again.matchAll(/<input\s+type="hidden"\s+name="([^"]+)"\s+value="([^"]*)"\s*\/?>/g)].map((m) => [m[1]!, m[2]!]),
    );
    const applied = await post("/admin/bulk", fields3);
    expect(applied.status).toBe(200);
    expect(await applied.text()).toMatch(/Requeued\s+<strong class="count">3<\/strong>/);
    const [row] = await server.db<
      { n: number }[]
    >`select count(*)::int as n from webhook_inbox_state where event_type = 'invoice.bulk' and state = 'unprocessed'`;
    expect(row?.n).toBe(3);
  });

  test("`createAdmin()` resolves a needs-review row with its note (400 without one) and replays a processed row through its handler", async () => {
    await parkRow(server.db, "evt_resolve_1");
    const form = await csrfOf("/admin/events/evt_resolve_1");
    const key = { provider: "stripe", endpoint: "billing" };
    const blank = await post("/admin/events/evt_resolve_1/resolve", { ...key, ...form, note: "  " });
    expect(blank.status).toBe(400);
    await blank.text();
    expect(await stateOf(server.db, "evt_resolve_1")).toBe("needs_review");
    const resolved = await post("/admin/events/evt_resolve_1/resolve", { ...key, ...form, note: "Refunded by hand in the dashboard" });
    expect(resolved.status).toBe(200);
    await resolved.text();
    expect(await stateOf(server.db, "evt_resolve_1")).toBe("resolved");
    expect(await (await get("/admin/events/evt_resolve_1")).text()).toContain("Refunded by hand in the dashboard");
    const again = await post("/admin/events/evt_resolve_1/resolve", { ...key, ...form, note: "twice" });
    expect(again.status).toBe(409);
    await again.text();
    const replayForm = await csrfOf("/admin/events/evt_1SkB1cLgUG5tbmjc0paidxx");
    const replayed = await post("/admin/events/evt_1SkB1cLgUG5tbmjc0paidxx/replay", { ...key, ...replayForm });
    expect(replayed.status).toBe(200);
    expect(await replayed.text()).toContain("0 inserted");
    const [ledger] = await server.db<
      { n: number }[]
    >`select count(*)::int as n from ledger_entries where event_id = 'evt_1SkB1cLgUG5tbmjc0paidxx'`;
    expect(ledger?.n).toBe(1);
  });

  test("`createAdmin()` bulk resolve needs a note and closes exactly the confirmed rows with it", async () => {
    await parkRow(server.db, "evt_bres_1", { type: "invoice.bres" });
    await parkRow(server.db, "evt_bres_2", { type: "invoice.bres" });
    const confirm = await (await get("/admin/bulk?action=resolve&type=invoice.bres")).text();
    const fields = Object.fromEntries(
      [...confirm.matchAll(/<input\s+type="hidden"\s+name="([^"]+)"\s+value="([^"]*)"\s*\/?>/g)].map((m) => [m[1]!, m[2]!]),
    );
    const noNote = await post("/admin/bulk", fields);
    expect(noNote.status).toBe(400);
    await noNote.text();
    const done = await post("/admin/bulk", { ...fields, note: "Settled with the customer" });
    expect(done.status).toBe(200);
    await done.text();
    const rows = await server.db<{ state: string; resolution_note: string }[]>`
      select state, resolution_note from webhook_inbox_state where event_type = 'invoice.bres' order by event_id`;
    expect([...rows]).toEqual([
      { state: "resolved", resolution_note: "Settled with the customer" },
      { state: "resolved", resolution_note: "Settled with the customer" },
    ]);
  });

  test("`createAdmin()` overview shows each endpoint's last hour, duplicates from the receiver's counters, and the backlogs", async () => {
    const text = await (await get("/admin")).text();
    expect(text).toContain("stripe / billing");
    expect(text).toMatch(/<svg\s+class="chart"/);
    expect(text).toMatch(/duplicates\s+\(12 of 24 answered since start\)/);
    expect(text).toContain("Outbox");
    expect(text).not.toContain("event backfill checkpoint");
    await server.db`insert into event_backfill_checkpoints (provider, endpoint, covered_until) values ('stripe', 'billing', now() - interval '2 hours')`;
    try {
      expect(await (await get("/admin")).text()).toMatch(/<b>2\.0 h<\/b>since the event backfill checkpoint/);
    } finally {
      await server.db`delete from event_backfill_checkpoints`;
    }
  });

  test("`createAdmin()` event page lists no invoice for an ignored or refused event, and says it changed nothing", async () => {
    const paidInvoice = "in_1SkA1pLgUG5tbmjcQ7nB2vXa"; // paid by the lifecycle
    const voided = JSON.parse(lifecycle().find((f) => f.name.includes("invoice.voided"))!.body) as {
      data: { object: Record<string, unknown> };
    };
    const voidInvoice = voided.data.object.id as string;
    expect(await server.deliver(eventBody("evt_effects_ignored", "invoice.upcoming", invoice({ id: paidInvoice })))).toBe("ignored");
    const ledgerBefore = await server.db`select id from ledger_entries order by id`;
    const paidOnVoid = { ...voided.data.object, status: "paid", amount_paid: voided.data.object.amount_due };
    expect(await server.deliver(eventBody("evt_effects_refused", "invoice.paid", paidOnVoid))).toBe("needs_review");
    expect([...(await server.db`select id from ledger_entries order by id`)]).toEqual([...ledgerBefore]);
    const changed = async (id: string) => {
      const response = await get(`/admin/events/${id}`);
      expect(response.status).toBe(200);
      const [, after] = (await response.text()).split("<h2>What it changed</h2>");
      expect(after).toBeDefined();
      return after!;
    };
    const ignored = await changed("evt_effects_ignored");
    expect(ignored).not.toContain(paidInvoice);
    expect(ignored).toContain("Nothing: this event was ignored at stripe / billing (no handler for its type).");
    const refused = await changed("evt_effects_refused");
    expect(refused).not.toContain(voidInvoice);
    expect(refused).toContain("Nothing: this event needs review at stripe / billing: it was refused or failed");
    // An event that did change something still lists it.
    expect(await changed("evt_1SkB1cLgUG5tbmjc0paidxx")).toContain(paidInvoice);
  });

  test("`createAdmin()` refuses a row action or bulk apply missing its form fields with 400 naming them, and writes nothing", async () => {
    await parkRow(server.db, "evt_nofields_1");
    const snapshot = async () => ({
      rows: [
        // As JSON text, every column as stored: the state row and its payload row (sql/0027).
        ...(await server.db`
          select row_to_json(w)::text as row, row_to_json(p)::text as payload
            from webhook_inbox w
            left join webhook_inbox_payloads p using (provider, endpoint, event_id, received_at)
           where w.event_id in ('evt_nofields_1', 'evt_1SkB1cLgUG5tbmjc0paidxx')
           order by w.event_id
        `),
      ],
      ledger: [...(await server.db`select id from ledger_entries order by id`)],
      outbox: [...(await server.db`select id from outbox order by id`)],
    });
    const before = await snapshot();
    const bearer = { authorization: `Bearer ${ADMIN_TOKEN}` };
    const key = { provider: "stripe", endpoint: "billing" };
    const cases: [string, Record<string, string>, string][] = [
      ["/admin/events/evt_nofields_1/requeue", {}, "Cannot requeue evt_nofields_1: missing form field(s) provider, endpoint"],
      [
        "/admin/events/evt_nofields_1/requeue",
        { provider: "stripe", endpoint: " " },
        "Cannot requeue evt_nofields_1: missing form field(s) endpoint",
      ],
      ["/admin/events/evt_nofields_1/resolve", {}, "Cannot resolve evt_nofields_1: missing form field(s) provider, endpoint, note"],
      ["/admin/events/evt_nofields_1/resolve", { ...key, note: " " }, "Cannot resolve evt_nofields_1: missing form field(s) note"],
      [
        "/admin/events/evt_1SkB1cLgUG5tbmjc0paidxx/replay",
        {},
        "Cannot replay evt_1SkB1cLgUG5tbmjc0paidxx: missing form field(s) provider, endpoint",
      ],
      [
        "/admin/bulk",
        {},
        "Cannot apply the bulk action: missing or invalid form field(s) action (requeue or resolve), count (a whole number), digest (32 hex digits, from the confirmation)",
      ],
      [
        "/admin/bulk",
        { action: "resolve", count: "x", digest: "0".repeat(32) },
        "missing or invalid form field(s) count (a whole number), note",
      ],
    ];
    for (const [path, fields, message] of cases) {
      const response = await post(path, fields, bearer);
      expect(response.status, `${path} ${JSON.stringify(fields)}`).toBe(400);
      expect(await response.text()).toContain(message);
    }
    expect(await snapshot()).toEqual(before);
    expect(await stateOf(server.db, "evt_nofields_1")).toBe("needs_review");
  });

  test("`createAdmin()` event page shows what the event changed: invoice, ledger entry, outbox message", async () => {
    const text = await (await get("/admin/events/evt_1SkB1cLgUG5tbmjc0paidxx")).text();
    expect(text).toContain("Ledger entries");
    expect(text).toMatch(/<td>payment<\/td>/);
    expect(text).toContain("InvoicePaymentBooked");
    expect(text).not.toContain("<pre>");
    const withPayload = await (await get("/admin/events/evt_1SkB1cLgUG5tbmjc0paidxx?payload=1")).text();
    expect(withPayload).toContain("<pre>");
  });

  test("`createAdmin()` overview names each endpoint's mode, and shows the other-mode tile only where Stripe's modes exist", async () => {
    const text = await (await get("/admin")).text();
    expect(text).toMatch(/stripe \/ billing <span class="mode">sync · live and test<\/span>/);
    expect(text).toMatch(/github \/ repos <span class="mode">sync<\/span>/);
    const sections = text.split('<section class="endpoint">');
    const billing = sections.find((x) => x.includes("stripe / billing"))!;
    const github = sections.find((x) => x.includes("github / repos"))!;
    expect(billing).toContain("ignored (other mode)");
    expect(github).not.toContain("ignored (other mode)");
  });

  test("`createAdmin()` overview lists workers and dispatchers from their heartbeats, alive, dead or stopped, and warns when work waits for a kind none of which is alive", async () => {
    await server.db`delete from loop_heartbeats`;
    try {
      // The lifecycle left its InvoicePaymentBooked messages pending, and no dispatcher runs.
      const before = await (await get("/admin")).text();
      expect(before).toContain("No worker or dispatcher has run in the last day.");
      expect(before).toMatch(/No dispatcher is alive: \d+ outbox message\(s\) wait for one/);
      await heartbeatRow(server.db, "worker", "worker-host", 2, "4 slot(s), batch 32");
      await heartbeatRow(server.db, "dispatcher", "lost-host", 120, "sink https://sink.example, 4 slot(s)");
      const text = await (await get("/admin")).text();
      expect(text).toMatch(/<tr class="alive">\s*<td>worker<\/td>\s*<td class="state">alive<\/td>\s*<td>worker-host<\/td>/);
      expect(text).toMatch(/<tr class="dead">\s*<td>dispatcher<\/td>\s*<td class="state">dead<\/td>\s*<td>lost-host<\/td>/);
      expect(text).toContain("sink https://sink.example, 4 slot(s)");
      expect(text).toMatch(/No dispatcher is alive/);
      expect(text).toContain("Sinks of the live dispatchers: none (no dispatcher is alive)");
    } finally {
      await server.db`delete from loop_heartbeats`;
    }
  });

  test("`createAdmin()` overview draws 30 days per endpoint: five charts of 30 bars, each titled with its day and figure", async () => {
    await seedThirtyDays(server.db, "repos", "github");
    const text = await (await get("/admin")).text();
    const github = text.split('<section class="endpoint">').find((x) => x.includes("github / repos"))!;
    for (const chart of ["received", "failed", "needs_review", "backlog", "latency"]) {
      const figure = github.split(`<figure class="day-chart series-${chart}">`)[1]!.split("</figure>")[0]!;
      expect(figure.match(/<rect\b/g)?.length).toBe(30);
    }
    const day = (back: number) => new Date(Date.now() - back * 86_400_000).toISOString().slice(0, 10);
    // Day 20 of the seed (9 days ago): 440 rows, one every 3 minutes, each applied 5 hours late (but the one parked):
    // at an hour's end the 100 of the 5 hours before wait, with the parked rows of days 0, 5, 10, 15 and 20.
    expect(github).toContain(`<title>${day(9)}: 440 received</title>`);
    expect(github).toContain(`<title>${day(9)}: p95 5.0 h (worst hour), max 5.0 h</title>`);
    expect(github).toContain(`<title>${day(9)}: at most 105 unsettled at an hour&#39;s end</title>`);
    // Day 25 (4 days ago): one parked; day 24 (5 days ago): 320 rows, every 20th retried.
    expect(github).toContain(`<title>${day(4)}: 1 needed review</title>`);
    expect(github).toContain(`<title>${day(5)}: 16 failed at least once</title>`);
    expect(github).toContain(`<title>${day(0)}: 0 received</title>`);
  });

  test("`createAdmin()` outbox page lists unpublished messages with their account; a parked one is requeued by its button, once", async () => {
    await server.db`
      insert into outbox (aggregate_type, aggregate_id, event_type, payload, account, needs_review_at, last_error, attempts)
      values ('invoice', 'in_outbox_parked', 'InvoicePaymentBooked', '{"event_id": "evt_outbox_parked"}', 'acct_1Q', now(), 'HTTP 500 from the sink', 10)
    `;
    const [parked] = await server.db<{ id: string }[]>`select id::text as id from outbox where aggregate_id = 'in_outbox_parked'`;
    const list = await (await get("/admin/outbox?state=needs_review")).text();
    expect(list).toMatch(
      new RegExp(
        `<td class="n">${parked!.id}</td>\\s*<td>InvoicePaymentBooked</td>\\s*<td>invoice in_outbox_parked</td>\\s*<td>acct_1Q</td>`,
      ),
    );
    expect(list).toContain("HTTP 500 from the sink");
    expect(list).toContain(`action="/admin/outbox/${parked!.id}/requeue"`);
    const all = await (await get("/admin/outbox")).text();
    expect(all.match(/<tr class="pending">/g)?.length).toBeGreaterThan(0);
    const fields = await csrfOf("/admin/outbox?state=needs_review");
    const first = await post(`/admin/outbox/${parked!.id}/requeue`, fields);
    expect(first.status).toBe(200);
    expect(await first.text()).toContain(`Requeued outbox message ${parked!.id}`);
    const [after] = await server.db<{ needs_review_at: Date | null; attempts: number }[]>`
      select needs_review_at, attempts from outbox where id = ${parked!.id}
    `;
    expect(after).toEqual({ needs_review_at: null, attempts: 0 });
    expect((await post(`/admin/outbox/${parked!.id}/requeue`, fields)).status).toBe(409);
    expect((await post(`/admin/outbox/99999999999999999999/requeue`, fields)).status).toBe(404);
    const readonly = await post(`/admin/outbox/${parked!.id}/requeue`, fields, {}, readonlyServer);
    expect(readonly.status).toBe(403);
  });

  test("`createAdmin()` events show each event's account and filter by it (platform: the platform's own); the event page names it", async () => {
    for (const [id, account] of [
      ["evt_acct_a", "acct_1A"],
      ["evt_acct_b", "acct_1B"],
    ] as const)
      await insertInbox(server.db, [
        inboxRowFor(
          { provider: "stripe", endpoint: "billing", eventId: id },
          { type: "invoice.accounted", payload: eventBody(id, "invoice.accounted", invoice()), account, settled: "ignored" },
        ),
      ]);
    const a = await (await get("/admin/events?type=invoice.accounted&account=acct_1A")).text();
    expect(a).toContain("evt_acct_a");
    expect(a).not.toContain("evt_acct_b");
    expect(a).toMatch(/<td class="account">acct_1A<\/td>/);
    const platform = await (await get("/admin/events?account=platform&id=evt_1SkB1cLgUG5tbmjc0paidxx")).text();
    expect(platform).toMatch(/<td class="account">platform<\/td>/);
    expect(await (await get("/admin/events?account=platform&type=invoice.accounted")).text()).toContain("No rows match.");
    expect(await (await get("/admin/events/evt_acct_b")).text()).toMatch(/<th>account<\/th>\s*<td class="account">acct_1B<\/td>/);
  });
});
