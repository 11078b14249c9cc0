/** Step `slice`: plans the chunks, cut in the pauses nearest every `segment_seconds`. */
import type { RunContext } from '../run/context.js';
import { energyEnvelopeOfFile, planSlices, type SlicePlan } from '../../../shared/audio/slicing.js';
import type { ProbeOutput } from './probe.js';

export async function slice(ctx: RunContext, pcmFile: string, probed: ProbeOutput): Promise<SlicePlan> {
  const { envelope } = await energyEnvelopeOfFile(pcmFile);
  return planSlices(envelope, probed.duration_seconds, {
    segmentSeconds: ctx.params.segment_seconds,
    maxSearchSeconds: ctx.d.config.sliceSearchSeconds,
  });
}

/** A saved plan still holds when the job's segment length and the audio's duration are the same. */
export function planHolds(plan: SlicePlan | undefined, segmentSeconds: number, probed: ProbeOutput): boolean {
  return (
    !!plan &&
    plan.segment_seconds === segmentSeconds &&
    !(Math.abs(plan.duration - probed.duration_seconds) > 1e-6)
  );
}
