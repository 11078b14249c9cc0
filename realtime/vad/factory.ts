/**
 * The one place the realtime tier chooses its VAD model: silero v5 (silero.ts)
 * behind the `Vad` interface (vad.ts) that segmentation depends on.
 */
import { SileroPool } from './silero.js';
import type { Vad, VadOptions } from './vad.js';

/** Loads the VAD: one model serving the per-stream classifiers of one thread. */
export function loadVad(opts: VadOptions): Promise<Vad> {
  return SileroPool.load(opts);
}
