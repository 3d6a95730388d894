/** The admin pages' only stylesheet, served at `/admin/admin.css` (the CSP allows styles from the page's own origin only). */
export const ADMIN_CSS = `
body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#1d1d1f;background:#fafafa}
header{background:#1d2b3a;color:#fff;padding:.6rem 1rem}header a{color:#cfe3ff;margin-left:1rem}
main{padding:1rem 1.5rem;max-width:1200px}h1{font-size:1.3rem;margin:.2rem 0 1rem}h2{font-size:1.05rem;margin:1.2rem 0 .4rem}
table{border-collapse:collapse;background:#fff;margin:.4rem 0}th,td{border:1px solid #ddd;padding:.25rem .5rem;text-align:left;vertical-align:top}
th{background:#f0f2f5;font-weight:600}td.n{text-align:right;font-variant-numeric:tabular-nums}
.tiles{display:flex;flex-wrap:wrap;gap:.6rem}.tile{background:#fff;border:1px solid #ddd;padding:.5rem .8rem;min-width:9rem}
.tile b{display:block;font-size:1.3rem}.warn b{color:#b3261e}.badge{background:#b3261e;color:#fff;padding:0 .4rem;margin-left:1rem}
.endpoint{background:#fff;border:1px solid #ddd;padding:.6rem 1rem;margin:.8rem 0}
svg.chart{display:block;background:#fff}.processed{fill:#2e7d32}.ignored{fill:#9e9e9e}.ignored_mode{fill:#607d8b}.resolved{fill:#6a1b9a}
.unprocessed{fill:#f9a825}.needs_review{fill:#c62828}.legend span{display:inline-block;margin-right:.8rem}
.legend i{display:inline-block;width:.8rem;height:.8rem;margin-right:.25rem;vertical-align:-1px}
.legend .processed{background:#2e7d32}.legend .ignored{background:#9e9e9e}.legend .ignored_mode{background:#607d8b}.legend .resolved{background:#6a1b9a}
.legend .unprocessed{background:#f9a825}.legend .needs_review{background:#c62828}
form.filters{display:flex;flex-wrap:wrap;gap:.5rem;align-items:end;background:#fff;border:1px solid #ddd;padding:.6rem}
form.filters label{display:flex;flex-direction:column;font-size:.85rem}form.inline{display:inline-block;margin:.2rem .4rem .2rem 0}
pre{background:#fff;border:1px solid #ddd;padding:.6rem;overflow:auto;max-height:40rem}
.error{color:#b3261e}.note{color:#555}.ok{color:#2e7d32}button{cursor:pointer}
h2 .mode{font-weight:400;font-size:.85rem;color:#555;margin-left:.5rem}
.days{display:flex;flex-wrap:wrap;gap:.8rem;margin-top:.5rem}.day-chart{margin:0}.day-chart figcaption{font-size:.8rem;color:#555}
.day-chart svg{display:block;background:#fff}rect.received{fill:#1565c0}rect.failed{fill:#ef6c00}rect.backlog{fill:#f9a825}
rect.latency{fill:#6a1b9a}rect.partial{fill-opacity:.35}
table.processes tr.alive .state{color:#2e7d32;font-weight:600}table.processes tr.dead .state{color:#b3261e;font-weight:600}
table.processes tr.stopped{color:#777}
`;
