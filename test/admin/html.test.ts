import { expect, test } from "bun:test";
import { escapeHtml, html, trusted } from "../../src/admin/html.ts";

test("`escapeHtml()` turns markup, quotes and backticks into entities", () => {
  expect(escapeHtml(`<img src=x onerror=alert(1)>`)).toBe("&lt;img src=x onerror=alert(1)&gt;");
  expect(escapeHtml(`" onmouseover='x' \`y\` & z`)).toBe("&quot; onmouseover=&#39;x&#39; &#96;y&#96; &amp; z");
  expect(escapeHtml("&lt;")).toBe("&amp;lt;");
});

test("`escapeHtml()` shows control, bidirectional and invisible characters as escapes", () => {
  expect(escapeHtml("evt_\u202eabc\u001b[31m\u200b")).toBe("evt_\\u202eabc\\x1b[31m\\u200b");
});

test("`escapeHtml()` writes null and undefined as nothing and other values through String()", () => {
  expect(escapeHtml(null)).toBe("");
  expect(escapeHtml(undefined)).toBe("");
  expect(escapeHtml(42)).toBe("42");
});

test("`html()` escapes every value, keeps nested html and trusted markup, joins arrays and drops false", () => {
  const type = "<script>alert(1)</script>";
  const tag = html; // not named html, so the formatter leaves the template's whitespace as written
  const out = tag`<td title="${type}">${type}</td>${[tag`<b>${"a&b"}</b>`, "<i>"]}${false}${null}${trusted("<hr>")}`;
  expect(out.markup).toBe(
    '<td title="&lt;script&gt;alert(1)&lt;/script&gt;">&lt;script&gt;alert(1)&lt;/script&gt;</td><b>a&amp;b</b>&lt;i&gt;<hr>',
  );
});
