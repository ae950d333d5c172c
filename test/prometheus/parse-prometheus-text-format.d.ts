/** The one function of parse-prometheus-text-format (no types of its own): prom2json's shape. */
declare module 'parse-prometheus-text-format' {
  interface Sample {
    labels?: Record<string, string>;
    /** Counters and gauges. */
    value?: string;
    /** Histograms: cumulative counts by upper bound, `+Inf` included. */
    buckets?: Record<string, string>;
    count?: string;
    sum?: string;
  }
  interface Family {
    name: string;
    help: string;
    type: 'COUNTER' | 'GAUGE' | 'HISTOGRAM' | 'SUMMARY' | 'UNTYPED';
    metrics: Sample[];
  }
  export default function parsePrometheusTextFormat(text: string): Family[];
}
