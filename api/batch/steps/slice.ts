/** Step `slice`: plans the chunks, cut in the pauses nearest every `segment_seconds`. */
import type { RunContext } from '../run/context.js';
import { energyEnvelopeOfFile, planSlices, type SlicePlan } from '../../../shared/audio/slicing.js';
import type { ProbeOutput } from './probe.js';
import { PermanentError } from '../errors.js';

export async function slice(ctx: RunContext, pcmFile: string, probed: ProbeOutput): Promise<SlicePlan> {
  const { envelope } = await energyEnvelopeOfFile(pcmFile);
  try {
    return planSlices(envelope, probed.duration_seconds, {
      segmentSeconds: ctx.params.segment_seconds,
      maxSearchSeconds: ctx.d.config.sliceSearchSeconds,
    });
  } catch (err) {
    // Only a workflow stored before segment_seconds was bounded can get here (null or Infinity).
    if (err instanceof RangeError)
      throw new PermanentError('invalid_request', `segment_seconds: ${err.message}`);
    throw err;
  }
}

/** A saved plan still holds when the job's segment length and the audio's duration are the same. */
export function planHolds(plan: SlicePlan | undefined, segmentSeconds: number, probed: ProbeOutput): boolean {
  return (
    !!plan &&
    plan.segment_seconds === segmentSeconds &&
    !(Math.abs(plan.duration - probed.duration_seconds) > 1e-6)
  );
}
