// Types for the untyped devDependency parse-prometheus-text-format 1.1.1 (only what the tests use).
declare module "parse-prometheus-text-format" {
  /** One sample (or, for histograms and summaries, one merged series); values stay strings as written. */
  export interface PrometheusSample {
    value?: string;
    labels?: Record<string, string>;
    buckets?: Record<string, string>;
    count?: string;
    sum?: string;
    timestamp_ms?: string;
  }

  /** One metric family: `# HELP`, `# TYPE` and its samples. */
  export interface PrometheusFamily {
    name: string;
    help: string;
    type: "COUNTER" | "GAUGE" | "HISTOGRAM" | "SUMMARY" | "UNTYPED";
    metrics: PrometheusSample[];
  }

  /** Parses the Prometheus text exposition format; throws on a line it cannot read. */
  export default function parsePrometheusTextFormat(text: string): PrometheusFamily[];
}
