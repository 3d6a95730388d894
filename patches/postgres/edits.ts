// The one source of patches/postgres@3.4.9.patch: text replacements in postgres.js 3.4.9, each made in
// its three builds (src/ for Bun and Node ESM, cjs/src/ for require, cf/src/ for workerd), which carry
// the same text at these places. `bun run patch:postgres` writes the patch from this list;
// test/dev/postgres-patch.test.ts fails when the committed patch differs or node_modules lacks an edit.
// patches/README.md is the bug report for each edit: reproduction, fix, test.

/** One replacement: `find` occurs exactly once in `file` of every build, and becomes `replace`. */
export interface PostgresEdit {
  /** Short name used by patches/README.md and the tests. */
  name: string;
  /** Path inside a build: prefixed with "", "cjs/" and "cf/" for the three builds. */
  file: "src/connection.js" | "src/index.js";
  find: string;
  replace: string;
  /** Why the edit exists, in a line (patches/README.md has the reproduction). */
  why: string;
}

/** The builds of the postgres.js package, as path prefixes of its files. */
export const BUILDS = ["cf/", "cjs/", ""] as const;

/** The package the edits apply to (the key of `patchedDependencies`). */
export const PACKAGE = "postgres@3.4.9";

/** Git blob ids of the files as npm ships postgres@3.4.9: the generator checks its pristine text against them. */
export const PRISTINE_BLOBS: Readonly<Record<string, string>> = {
  "cf/src/connection.js": "8e79170aeb13efe8c3c77ccede0cd3a115b5e1b5",
  "cf/src/index.js": "ffbe7aef075d6037c540cbd5e8f7e298d4345cc3",
  "cjs/src/connection.js": "07f6716702ac888215c86ad6e0071aaf55ae519c",
  "cjs/src/index.js": "f09c61c7e998f411560b95c9a8e1ed6a97972c11",
  "src/connection.js": "1b1cccde43b4570d5d071d6ffaab2669b3c2065a",
  "src/index.js": "c7fba3dace20173f4cb13f3f138bb6d213b43683",
};

export const EDITS: readonly PostgresEdit[] = [
  {
    name: "next-write-after-close",
    file: "src/connection.js",
    why: "a write to a connection whose socket had closed threw a TypeError from a timer, which ends the process",
    find: `  function nextWrite(fn) {
    const x = socket.write(chunk, fn)
`,
    replace: `  function nextWrite(fn) {
    // webhook-inbox patch (next-write-after-close): the socket closed before this write went out
    if (!socket) {
      const err = Errors.connection('CONNECTION_CLOSED', options)
      nextWriteTimer !== null && clearImmediate(nextWriteTimer)
      chunk = nextWriteTimer = null
      query && queryError(query, err)
      while (sent.length)
        queryError(sent.shift(), err)
      query = null
      return true
    }
    const x = socket.write(chunk, fn)
`,
  },
  {
    name: "closed-forgets-write",
    file: "src/connection.js",
    why: "closed() cancelled a pending write but kept its timer id and bytes, so the reopened connection never sent its startup message",
    find: `    clearImmediate(nextWriteTimer)
    socket.removeListener('data', data)
`,
    replace: `    clearImmediate(nextWriteTimer)
    chunk = nextWriteTimer = null // webhook-inbox patch (closed-forgets-write)
    socket.removeListener('data', data)
`,
  },
  {
    name: "closed-forgets-query",
    file: "src/connection.js",
    why: "an ErrorResponse that arrived before the close failed the first query of the reopened connection",
    find: `    !hadError && (query || sent.length) && error(Errors.connection('CONNECTION_CLOSED', options, socket))
`,
    replace: `    !hadError && (query || sent.length) && error(Errors.connection('CONNECTION_CLOSED', options, socket))
    query = results = errorResponse = null // webhook-inbox patch (closed-forgets-query)
`,
  },
  {
    name: "array-types-error-handled",
    file: "src/connection.js",
    why: "an error answering the array-types query at connection start was an unhandled rejection, which ends the process",
    find: `        return fetchArrayTypes()
`,
    replace: `        // webhook-inbox patch (array-types-error-handled): errored() passed the error on already
        return fetchArrayTypes().catch(() => socket && socket.destroy())
`,
  },
  {
    name: "begin-keeps-close",
    file: "src/index.js",
    why: "sql.begin rejected, but the statements waiting in its own queue were never settled; it now also remembers the close for begin-refuses-after-close",
    find: `      , prepare = null

    try {
      await sql.unsafe('begin ' + options.replace(/[^a-z ]/ig, ''), [], { onexecute }).execute()
      return await Promise.race([
        scope(connection, fn),
        new Promise((_, reject) => connection.onclose = reject)
      ])
`,
    replace: `      , prepare = null
      , lost = null

    try {
      await sql.unsafe('begin ' + options.replace(/[^a-z ]/ig, ''), [], { onexecute }).execute()
      return await Promise.race([
        scope(connection, fn),
        new Promise((_, reject) => connection.onclose = e => {
          // webhook-inbox patch (begin-keeps-close): settle the queue, refuse what comes later
          lost = e
          while (queries.length)
            queries.shift().reject(e)
          reject(e)
        })
      ])
`,
  },
  {
    name: "begin-refuses-after-close",
    file: "src/index.js",
    why: "a statement of a transaction whose connection closed went to the reopened connection: it ran outside the transaction, or inside another one",
    find: `        q.catch(e => uncaughtError || (uncaughtError = e))
        c.queue === full
`,
    replace: `        q.catch(e => uncaughtError || (uncaughtError = e))
        // webhook-inbox patch (begin-refuses-after-close): the pool may reopen c for other work
        if (lost)
          return q.reject(lost)
        c.queue === full
`,
  },
  {
    name: "commit-tag",
    file: "src/index.js",
    why: "PostgreSQL answers COMMIT in a failed transaction with the tag ROLLBACK and no error: sql.begin resolved for a transaction that saved nothing",
    find: `        prepare
          ? await sql\`prepare transaction '\${ sql.unsafe(prepare) }'\`
          : await sql\`commit\`
`,
    replace: `        const done = prepare
          ? await sql\`prepare transaction '\${ sql.unsafe(prepare) }'\`
          : await sql\`commit\`
        // webhook-inbox patch (commit-tag): a failed transaction answers COMMIT with the tag ROLLBACK
        const expected = prepare ? 'PREPARE TRANSACTION' : 'COMMIT'
        if (done.command !== expected)
          throw Errors.generic('COMMIT_ROLLED_BACK', expected + ' completed as ' + done.command + ': the transaction was rolled back, nothing of it was saved')
`,
  },
];
