/**
 * The steps of one workflow run in their order (steps/order.ts): probe →
 * slice → transcribe chunks → aggregate → review (optional) → report, then
 * billing. Step outputs are merged into the workflow row as they complete;
 * a resumed run reuses the saved probe and slice plan and every chunk
 * checkpoint that still holds, and fetches the audio again only when a
 * chunk is missing.
 */
import { promises as fsp } from 'node:fs';
import { round3 } from '../../shared/numbers.js';
import type { RemoteReviewer } from './review/llm.js';
import { runStep } from './run/attempts.js';
import { adoptUnbilledChunks, loadCheckpoints } from './run/checkpoints.js';
import type { RunContext } from './run/context.js';
import type { SlicePlan } from '../../shared/audio/slicing.js';
import { aggregateOutput, aggregateStep } from './steps/aggregate.js';
import { STEPS } from './steps/order.js';
import { pcmFileOf, probe, type ProbeOutput } from './steps/probe.js';
import { report } from './steps/report.js';
import { review } from './steps/review.js';
import { planHolds, slice } from './steps/slice.js';
import { transcribeChunks } from './steps/transcribe.js';
import type { ChunkCheckpoint } from './types.js';

export async function runSteps(ctx: RunContext, reviewer: RemoteReviewer): Promise<void> {
  const { d, row, params: p, store, keys, workDir } = ctx;
  const { repo } = d;
  const prior = row.output ?? {};
  let plan = prior.slice as SlicePlan | undefined;
  let probed = prior.probe as ProbeOutput | undefined;

  // ---- probe: if every chunk of a saved plan is checkpointed, the audio need not be fetched again ----
  let checkpoints =
    plan && probed
      ? await loadCheckpoints(store, keys, probed.audio_sha256, plan.slices)
      : new Map<number, ChunkCheckpoint>();
  const needAudio = !plan || !probed || checkpoints.size < plan.slices.length;
  let pcmFile: string | undefined;
  if (needAudio) {
    await fsp.mkdir(workDir, { recursive: true });
    probed = await runStep(ctx, STEPS.probe, () => probe(ctx));
    pcmFile = pcmFileOf(workDir);
    await repo.saveOutput(row.id, { probe: probed });
  } else {
    await repo.stepReused(row.id, STEPS.probe);
  }
  const audio = probed!;

  // ---- slice ----
  if (!planHolds(plan, p.segment_seconds, audio)) {
    plan = await runStep(ctx, STEPS.slice, () => slice(ctx, pcmFile!, audio));
    await repo.saveOutput(row.id, { slice: plan });
  } else {
    await repo.stepReused(row.id, STEPS.slice);
  }
  const slices = plan!.slices;
  if (needAudio) checkpoints = await loadCheckpoints(store, keys, audio.audio_sha256, slices);

  // ---- transcribe, `concurrency` chunks at a time ----
  const transcribed = await transcribeChunks(ctx, slices, checkpoints, audio, pcmFile);
  if (pcmFile) await fsp.rm(workDir, { recursive: true, force: true }).catch(() => {});
  await repo.saveOutput(row.id, { chunks: transcribed.summaries });

  // ---- aggregate ----
  const ordered = slices.map((s) => checkpoints.get(s.index)!);
  const result = await runStep(ctx, STEPS.aggregate, () =>
    aggregateStep(ctx, ordered, audio.duration_seconds),
  );
  await repo.saveOutput(row.id, { aggregate: aggregateOutput(ctx, result) });

  // ---- review ----
  let reviewOut: Record<string, unknown> | null = null;
  if (p.review) {
    reviewOut = await runStep(ctx, STEPS.review, () => review(ctx, reviewer, ordered, result));
  } else {
    await repo.stepSet(row.id, STEPS.review, 'skipped');
  }

  // ---- report ----
  const reported = await runStep(ctx, STEPS.report, () => report(ctx, ordered, audio, transcribed));
  // Billed: the audio this workflow had transcribed (any of its runs) and the chunks it adopted from
  // an earlier workflow that was never billed (errored); chunks reused from an earlier workflow that
  // was billed cost no engine time and are not billed again.
  const owned = await adoptUnbilledChunks(d.db, store, keys, row.id, ordered);
  const billed = owned.filter((c) => c.workflow_id === row.id).reduce((a, c) => a + (c.end - c.start), 0);
  await ctx.reservation.bill(round3(billed));
  await repo.saveOutput(row.id, { review: reviewOut, report: reported, result });
}
