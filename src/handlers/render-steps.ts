import type { Db, Tx } from "../db/db.ts";
import type { HandlerContext, Step, StepsBuilder } from "./handler-table.ts";
import { classifyHead, sqlSkeleton, type StepKind } from "./step-sql.ts";

/**
 * A statement handler breaks a rule the framework enforces (a step name that is not a lowercase
 * identifier, a reference to a missing step, a step whose SQL cannot be classified as a read or a write
 * of a literal table, two steps writing one table, a step writing the inbox).
 * A programming error, deliberately not a PermanentError: the delivery fails with a 5xx, the worker
 * retries and records it as `last_error`, so it stays visible until the handler is fixed; nothing is
 * parked as if the event were bad.
 */
export class HandlerDefinitionError extends Error {
  override name = "HandlerDefinitionError";
}

/** Step names: lowercase identifiers, rendered as `h_<name>` (PostgreSQL's identifier limit is 63 bytes). */
const STEP_NAME = /^[a-z][a-z0-9_]{0,40}$/;

/** The CTE name the framework gives a step. */
function cteName(step: string): string {
  return `h_${step}`;
}

/** A statement handler's steps rendered for one event: the CTE list, and whether they wrote. */
export interface RenderedSteps {
  /** `h_a as (…), h_b as (…)`: never empty. */
  ctes: Step;
  /**
   * `false or exists (select 1 from "h_a") or …`: true when a step inserted, updated or deleted a row
   * (returned one). Sound although `exists` stops at the first row: a step that returned none has run
   * to completion; one that returned a row has written.
   */
  wrote: Step;
}

/**
 * What is static about one shape of a handler's steps (their names, in order, and the places in the
 * code that wrote them): which steps write, and the SQL text around the steps' bodies, so a build of a
 * known shape makes two fragments that only carry the bodies (and so bind only their values).
 */
interface Shape {
  names: string[];
  templates: readonly (readonly string[])[];
  writing: string[];
  /** `"h_a" as (`, `), "h_b" as (`, …, `)`: the text around the bodies of `ctes`. */
  ctes: TemplateStringsArray;
  /** The whole text of `wrote`: it has no values. */
  wrote: TemplateStringsArray;
  /** `wrote` as a fragment, made at its first use. */
  wroteFragment?: Step;
}

/** Shapes kept per handler: a handler whose steps vary more than this is still checked at every build. */
const MAX_SHAPES = 16;

/** Step names whose `"h_<name>"` text is kept per handler (names come from code, so few). */
const MAX_REFERENCES = 64;

/**
 * Turns a {@link StepsBuilder} into what the receiver and the worker splice into their statement:
 * each step becomes `h_<name> as (…)`, `step(name)` renders `"h_<name>"`, and the steps are checked
 * (a few regular expressions over their text, no SQL sent) before anything runs, at the first build
 * of each shape. No steps render as `h__none as (select 1)` (a name no step can take).
 * @throws HandlerDefinitionError when the steps break a rule, naming `handler`, the steps and the table.
 */
export function renderSteps(
  handler: string,
  build: StepsBuilder,
): (sql: Db | Tx, object: Record<string, unknown>, context: HandlerContext) => RenderedSteps {
  // Shapes whose templates were already checked: the checks read only template text, so a build of a
  // known shape skips them (a few pointer comparisons on the sync path instead).
  const shapes: Shape[] = [];
  const knownShape = (steps: [string, Step][]) =>
    shapes.find(
      (shape) =>
        shape.names.length === steps.length &&
        steps.every(([name, body], i) => shape.names[i] === name && shape.templates[i] === templateOf(body)),
    );
  // Fragments with no values are made once and spliced into every statement: postgres.js only reads a
  // fragment's text when it builds the statement around it, and the allocations are on the sync path.
  // `"h_<name>"` per step name (names are checked identifiers, so quoting is all the escaping they need).
  const references = new Map<string, Step>();
  let gate: Step | undefined;
  return (sql, object, context) => {
    const referenced = new Set<string>();
    const helpers = {
      step: (name: string): Step => {
        referenced.add(name);
        let reference = references.get(name);
        if (!reference && STEP_NAME.test(name) && references.size < MAX_REFERENCES)
          references.set(name, (reference = sql(templateStrings([`"${cteName(name)}"`]))));
        return reference ?? sql`${sql(cteName(name))}`; // any other name is refused below
      },
      gate: (gate ??= sql`exists (select 1 from inbox)`),
    };
    const steps = Object.entries(build(sql, object, context, helpers));
    let shape = knownShape(steps);
    for (const name of referenced) if (shape && !steps.some(([n]) => n === name)) shape = undefined;
    if (!shape) {
      const writing = checkSteps(handler, steps, referenced);
      if (shapes.length >= MAX_SHAPES || !steps.every(([, body]) => isTemplateFact(body))) return nested(sql, steps, writing);
      shapes.push((shape = shapeOf(steps, writing)));
    }
    if (steps.length === 0) return { ctes: sql`h__none as (select 1)`, wrote: sql`false` };
    return { ctes: sql(shape.ctes, ...steps.map(([, body]) => body)), wrote: (shape.wroteFragment ??= sql(shape.wrote)) };
  };
}

/**
 * The same text as a {@link Shape} gives, built from nested fragments: for a shape that is not kept
 * (its strings arrays would be new at every build, and postgres.js keeps an entry per strings array).
 */
function nested(sql: Db | Tx, steps: [string, Step][], writing: string[]): RenderedSteps {
  if (steps.length === 0) return { ctes: sql`h__none as (select 1)`, wrote: sql`false` };
  let ctes: Step | undefined;
  for (const [name, body] of steps)
    ctes = ctes ? sql`${ctes}, ${sql(cteName(name))} as (${body})` : sql`${sql(cteName(name))} as (${body})`;
  let wrote: Step = sql`false`;
  for (const name of writing) wrote = sql`${wrote} or exists (select 1 from ${sql(cteName(name))})`;
  return { ctes: ctes as Step, wrote };
}

/** The static text of `steps` (checked, names valid) for {@link Shape}. */
function shapeOf(steps: [string, Step][], writing: string[]): Shape {
  const names = steps.map(([name]) => name);
  const around = names.map((name, i) => `${i === 0 ? "" : "), "}"${cteName(name)}" as (`);
  const wrote = ["false", ...writing.map((name) => `exists (select 1 from "${cteName(name)}")`)].join(" or ");
  return {
    names,
    templates: steps.map(([, body]) => templateOf(body)) as (readonly string[])[],
    writing,
    ctes: templateStrings(names.length === 0 ? [""] : [...around, ")"]),
    wrote: templateStrings([wrote]),
  };
}

/**
 * `parts` as postgres.js reads a tagged template's strings (an array with `raw`): its `sql` tag then
 * makes a query fragment with the values between the parts, as for a template written in the code.
 * Made once per shape and kept: postgres.js caches per strings array.
 */
function templateStrings(parts: string[]): TemplateStringsArray {
  return Object.freeze(Object.assign([...parts], { raw: Object.freeze([...parts]) })) as unknown as TemplateStringsArray;
}

/** Enforces the rules of {@link StepsBuilder} on one build's steps; returns the names of the steps that write. */
function checkSteps(handler: string, steps: [string, Step][], referenced: Set<string>): string[] {
  const names = new Set(steps.map(([name]) => name));
  for (const name of [...names, ...referenced]) {
    if (!STEP_NAME.test(name))
      throw new HandlerDefinitionError(
        `Handler "${handler}": step name "${name}" is not a lowercase identifier (a-z, 0-9, _; at most 41 characters)`,
      );
  }
  for (const name of referenced) {
    if (!names.has(name))
      throw new HandlerDefinitionError(
        `Handler "${handler}": step("${name}") refers to a step it does not return (steps: ${[...names].join(", ") || "none"})`,
      );
  }
  const writers = new Map<string, string>();
  for (const [name, body] of steps) {
    const { kind, returning } = factsOf(body);
    if (kind.kind === "refused") throw new HandlerDefinitionError(`Handler "${handler}": step "${name}" ${kind.reason}`);
    if (kind.kind === "read") continue;
    const table = kind.table;
    if (!returning) {
      throw new HandlerDefinitionError(
        `Handler "${handler}": step "${name}" writes table ${table} without a RETURNING clause; the framework reads a step's RETURNING rows to see whether a duplicate wrote (add e.g. \`returning 1\`)`,
      );
    }
    if (table === "webhook_inbox")
      throw new HandlerDefinitionError(
        `Handler "${handler}": step "${name}" writes webhook_inbox; the framework settles the inbox row, a handler never writes it`,
      );
    const first = writers.get(table);
    if (first !== undefined) {
      throw new HandlerDefinitionError(
        `Handler "${handler}": steps "${first}" and "${name}" both write table ${table}; one statement sees one snapshot, so the second cannot see the first's row (an update of a row inserted by another step does nothing). Combine them into one insert … on conflict do update, or write a plain handler`,
      );
    }
    writers.set(table, name);
  }
  return [...writers.values()];
}

/** What the rules need to know of one step: how it begins (a read, a write of a table, refused) and whether it has RETURNING. */
interface StepFacts {
  kind: StepKind;
  returning: boolean;
}

/**
 * Facts per template: a step written at one place in the code always has the same template strings
 * array (the same object, ECMAScript "GetTemplateObject"), so what its own text says is read once;
 * facts that depend on a nested fragment (a blank head, RETURNING only in a nested part) are read on
 * every build. Keeps the checks off the sync path's cost.
 */
const factsByTemplate = new WeakMap<readonly string[], StepFacts>();

/** The template strings array of a step (its identity names the place in the code that wrote it). */
function templateOf(step: Step): readonly string[] | undefined {
  return (step as unknown as { strings?: readonly string[] }).strings;
}

/** True when the step's facts were read from its own template (so they hold for every build of it). */
function isTemplateFact(step: Step): boolean {
  const strings = templateOf(step);
  return strings !== undefined && factsByTemplate.has(strings);
}

function factsOf(step: Step): StepFacts {
  const strings = templateOf(step);
  const known = strings && factsByTemplate.get(strings);
  if (known) return known;
  const facts = { kind: stepKind(step), returning: /\breturning\b/i.test(stepText(step)) };
  const ownHead = sqlSkeleton(strings?.[0] ?? "").replace(/[\s(]+/g, "") !== "";
  const ownReturning = strings !== undefined && /\breturning\b/i.test(sqlSkeleton(strings.join(" ")));
  if (strings && ownHead && (facts.kind.kind !== "write" || ownReturning)) factsByTemplate.set(strings, facts);
  return facts;
}

/** A step's SQL text without its values, comments or literals ({@link sqlSkeleton}), nested fragments included. */
function stepText(step: Step): string {
  const node = step as unknown as { strings?: readonly string[]; args?: readonly unknown[] };
  if (!node.strings) return "";
  const nested = (node.args ?? []).map((arg) => (isFragment(arg) ? stepText(arg as Step) : " "));
  return sqlSkeleton(node.strings.map((s, i) => s + (nested[i] ?? "")).join(""));
}

/** True for a nested postgres.js query fragment (it has template strings), false for a bound value. */
function isFragment(arg: unknown): boolean {
  return typeof arg === "object" && arg !== null && "strings" in arg;
}

/**
 * How a step begins ({@link classifyHead}), read from its leading SQL text (postgres.js keeps a
 * query's template strings in `strings` and its values in `args`). A step whose own text before its
 * first value is only whitespace, comments or `(` is read through the nested fragment that follows,
 * the prefix kept (so `(${fragment})` and `/* c *\/ ${fragment}` classify as the fragment does); a step
 * that starts with a bound value, or is no template query at all, is refused.
 */
export function stepKind(step: Step): StepKind {
  let node = step as unknown as { strings?: readonly string[]; args?: readonly unknown[] } | undefined;
  let prefix = "";
  for (let depth = 0; depth < 8; depth++) {
    if (!node?.strings) break;
    const head = prefix + sqlSkeleton(node.strings[0] ?? "");
    if (head.replace(/[\s(]+/g, "") !== "" || node.strings.length === 1) return classifyHead(head);
    if (!isFragment(node.args?.[0])) return { kind: "refused", reason: "starts with a bound value, not SQL text" };
    prefix = head;
    node = node.args?.[0] as typeof node;
  }
  return { kind: "refused", reason: "is not a sql`…` template (or nests fragments more than 8 deep before any SQL text)" };
}
