// Test preload: the PostgreSQL server of the run and its migrated template database, which each test file
// clones (test/support/helpers.ts freshDatabase). Under the suite runner (`bun run test`,
// src/dev/bin/test-suite.ts) TEST_ADMIN_URL is already set: the runner started one server for all its
// parallel workers and prepared the template, and stops it when they are done. Under a plain `bun test`
// this preload starts one (src/dev/test-cluster.ts): DATABASE_URL's server (its user must be allowed to
// CREATE DATABASE), else an embedded PostgreSQL 18 in a temporary directory. A server that cannot start
// fails the run: never a green run without a database.
import { afterAll } from "bun:test";
import { startTestCluster } from "../src/dev/test-cluster.ts";

if (!process.env.TEST_ADMIN_URL) {
  const cluster = await startTestCluster(process.env.DATABASE_URL);
  process.env.TEST_ADMIN_URL = cluster.url;
  afterAll(cluster.stop);
}
