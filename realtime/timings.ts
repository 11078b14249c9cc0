/**
 * The realtime tier's own timing figures for `/stats` (and the benchmark's
 * plain-`ws` twin, which reports the same ones): event-loop lag and gateway
 * overhead per utterance (completion latency minus the engine call), since
 * the last reset.
 */
import { createHistogram, monitorEventLoopDelay } from 'node:perf_hooks';

/** The sampling timer's interval: the histogram records resolution + lag, so lag = value - resolution. */
const LOOP_RESOLUTION_MS = 5;

export class GatewayTimings {
  private readonly overhead = createHistogram();
  private readonly loopDelay = monitorEventLoopDelay({ resolution: LOOP_RESOLUTION_MS });

  constructor() {
    this.loopDelay.enable();
  }

  /** One transcribed utterance: its completion latency and the engine's share of it (ms). */
  recordCompletion(latencyMs: number, engineMs: number): void {
    this.overhead.record(Math.max(1, Math.round((latencyMs - engineMs) * 1000)));
  }

  snapshot() {
    const lag = (ns: number) => Math.max(0, Math.round((ns / 1e6 - LOOP_RESOLUTION_MS) * 100) / 100);
    const o = this.overhead;
    return {
      eventLoopLagMs: {
        p50: lag(this.loopDelay.percentile(50)),
        p99: lag(this.loopDelay.percentile(99)),
        max: lag(this.loopDelay.max),
      },
      gatewayOverheadMs: {
        n: o.count,
        p50: o.count ? o.percentile(50) / 1000 : 0,
        p99: o.count ? o.percentile(99) / 1000 : 0,
      },
    };
  }

  reset(): void {
    this.loopDelay.reset();
    this.overhead.reset();
  }

  close(): void {
    this.loopDelay.disable();
  }
}
