/**
 * One batch workflow run: probe → slice → transcribe chunks → aggregate →
 * review (optional) → report, then hand the webhook (optional) to its queue.
 *
 * Resumability: every transcribed chunk is checkpointed to the artifact store
 * as soon as it exists (`transcription/{request_id}/chunk_{i}.json`) and is
 * never transcribed again while its checkpoint matches the audio (sha256 of
 * the decoded samples) and the slice bounds. Step outputs are merged into the
 * workflow row as they complete. A run holds a lease it keeps renewing; when
 * a process dies the lease lapses, the sweeper re-queues the workflow and the
 * next run resumes from the checkpoints.
 */
import { randomBytes } from 'node:crypto';
import { setMaxListeners } from 'node:events';
import { promises as fsp } from 'node:fs';
import path from 'node:path';
import type { Knex } from 'knex';
import type { Logger } from 'pino';
import type { BatchConfig } from '../../shared/config/batch.js';
import { OutboundClient, OutboundError } from '../../shared/net/index.js';
import { type ArtifactStore, tenantStore } from '../../shared/storage/index.js';
import { type SpeechEngine, SpeechError } from '../../shared/stt/types.js';
import { isDependencyUnavailable } from '../../shared/process/index.js';
import { windowUsage, type UsageLedger } from '../../shared/usage.js';
import { decodeToPcmFile, fetchAudio, readRange } from './audio.js';
import { LeaseLostError, PermanentError, ShutdownError, withoutPaths } from './errors.js';
import * as metrics from './metrics.js';
import { WorkflowRepo, type WorkflowRow } from './repo.js';
import { annotateChunkOfflineAsync, correctOffline, RemoteReviewer, type ChunkReview } from './review.js';
import {
  energyEnvelope,
  energyEnvelopeOfFile,
  planSlices,
  SAMPLE_RATE,
  sliceByteRange,
  splitUtterances,
  type Slice,
  type SlicePlan,
} from './slicing.js';
import type { BatchResult, ChunkCheckpoint, ResultSegment, WorkflowParams } from './types.js';

export interface RunnerHooks {
  /** Called once per chunk right before it goes to the engine (tests count these). */
  onEngineCall?(workflowId: string, chunkIndex: number): void;
  /** Called when a step's attempt starts and when it ends (tests watch the event loop during one). */
  onStep?(workflowId: string, name: string, phase: 'start' | 'end'): void;
}

export interface RunnerDeps {
  db: Knex;
  ledger: UsageLedger;
  repo: WorkflowRepo;
  store: ArtifactStore;
  speech: SpeechEngine;
  outbound: OutboundClient;
  config: BatchConfig;
  ffmpegPath: string;
  defaultModel: string;
  /** Rolling billing window of maxAudioSecondsPerWindow. */
  usageWindowSeconds: number;
  logger: Logger;
  hooks?: RunnerHooks;
  /** Bounds engine calls in flight across all runs of this process. */
  engineSlots: Semaphore;
  /** Queue the webhook delivery of a finished workflow. */
  enqueueWebhook(workflowId: string): Promise<void>;
  /**
   * A run stopped because Postgres (or storage) became unreachable: the
   * workflow is neither errored nor lost; the caller queues it again once
   * the dependency answers, and it resumes from its checkpoints.
   */
  onOutage?(workflowId: string): void;
}

export const artifactPrefix = (requestId: string) => `transcription/${requestId}/`;

interface ChunkSummary {
  index: number;
  start: number;
  end: number;
  key: string;
  reused: boolean;
  text_chars: number;
  engine_ms: number;
}

const round3 = (x: number) => Math.round(x * 1000) / 1000;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export class WorkflowRunner {
  readonly runnerId = `${process.pid}-${randomBytes(4).toString('hex')}`;
  private readonly reviewer: RemoteReviewer;
  private readonly active = new Map<string, { abort: AbortController; done: Promise<void> }>();
  private stopping = false;

  constructor(private readonly d: RunnerDeps) {
    this.reviewer = new RemoteReviewer(d.config.review);
  }

  /**
   * Shutdown: runs in progress stop at their next await, give their lease
   * back (so another process resumes them at once from the checkpoints) and
   * this resolves when they have, or after `timeoutMs`.
   */
  async shutdown(timeoutMs = 10_000): Promise<void> {
    this.stopping = true;
    const runs = [...this.active.values()];
    for (const r of runs) r.abort.abort(new ShutdownError('worker shutting down'));
    await Promise.race([
      Promise.all(runs.map((r) => r.done)),
      new Promise((r) => setTimeout(r, timeoutMs).unref()),
    ]);
  }

  /** Runs (or resumes) a workflow if nobody else holds it. */
  async run(workflowId: string, jobId: string | null = null): Promise<void> {
    if (this.stopping) return;
    // Already running here (a re-queued job and the released one can both arrive):
    // the lease is this runner's own, so acquiring again would run it twice.
    if (this.active.has(workflowId)) return;
    const abort = new AbortController();
    let finished!: () => void;
    this.active.set(workflowId, { abort, done: new Promise<void>((r) => (finished = r)) });
    metrics.runsActive.inc();
    try {
      await this.runHeld(workflowId, jobId, abort);
    } finally {
      this.active.delete(workflowId);
      metrics.runsActive.dec();
      finished();
    }
  }

  private async runHeld(workflowId: string, jobId: string | null, abort: AbortController): Promise<void> {
    const { repo, config } = this.d;
    const row = await repo.acquire(workflowId, this.runnerId, config.leaseSeconds, jobId);
    if (!row) return; // finished, or another live process has it
    const log = this.d.logger.child({ workflowId, requestId: row.request_id, run: row.runs });
    let lost = false;
    const heartbeat = setInterval(
      () => {
        repo
          .renew(workflowId, this.runnerId, config.leaseSeconds)
          .then((ok) => {
            if (!ok && !lost) {
              lost = true;
              abort.abort(new LeaseLostError('lease lost'));
            }
          })
          .catch((err) => log.warn({ err }, 'lease renewal failed'));
      },
      Math.max(200, (config.leaseSeconds * 1000) / 3),
    );
    const workDir = path.join(config.tmpDir, `${workflowId}-${this.runnerId}`);
    try {
      await removeDeadWorkDirs(config.tmpDir, workflowId, workDir, log);
      log.info('workflow run started');
      await this.execute(row, workDir, abort.signal, log);
      // The webhook step waits before the workflow ends: if the hand-off below is lost, the sweeper finds it.
      if (row.params.webhook_url) await repo.stepSet(workflowId, 'webhook', 10_000, 'waiting');
      if (await repo.finish(workflowId, this.runnerId, 'complete')) {
        metrics.finished.inc({ status: 'complete' });
        log.info('workflow complete');
        await this.handOffWebhook(row, log);
      }
    } catch (err) {
      if (lost || err instanceof LeaseLostError) {
        log.warn('lease lost; another run continues this workflow');
        return;
      }
      if (abort.signal.reason instanceof ShutdownError) {
        await repo.release(workflowId, this.runnerId).catch(() => {});
        log.info('workflow paused by shutdown; it resumes from its checkpoints on the next worker');
        return;
      }
      if (isStoreOutage(err)) return this.pausedByOutage(workflowId, err, log);
      const e = err as Error;
      const error = { name: e.name || 'Error', message: withoutPaths(e.message || String(err)) };
      // The caller's input (URL, audio) is at fault: its message, never a stack with server paths.
      if (err instanceof PermanentError || err instanceof OutboundError)
        log.warn({ error }, 'workflow errored');
      else log.error({ err }, 'workflow errored');
      try {
        if (row.params.webhook_url) await repo.stepSet(workflowId, 'webhook', 10_000, 'waiting');
        if (await repo.finish(workflowId, this.runnerId, 'errored', error)) {
          metrics.finished.inc({ status: 'errored' });
          await this.handOffWebhook(row, log);
        }
      } catch (finishErr) {
        // The failure could not be recorded (the database went away): the run is retried later.
        if (isDependencyUnavailable(finishErr)) return this.pausedByOutage(workflowId, finishErr, log);
        throw finishErr;
      }
    } finally {
      clearInterval(heartbeat);
      await fsp.rm(workDir, { recursive: true, force: true }).catch(() => {});
    }
  }

  /** A dependency outage stopped the run: give the lease back if possible and let the runtime requeue it. */
  private async pausedByOutage(workflowId: string, err: unknown, log: Logger): Promise<void> {
    log.warn({ err }, 'workflow paused: a dependency is unavailable; it resumes from its checkpoints');
    await this.d.repo.release(workflowId, this.runnerId).catch(() => {});
    this.d.onOutage?.(workflowId);
  }

  /** Queues the first delivery; a failure here is not the workflow's: the sweeper queues it later (WEBHOOK_RECOVER_AFTER_SECONDS in shared/config/batch.ts). */
  private async handOffWebhook(row: WorkflowRow, log: Logger): Promise<void> {
    if (!row.params.webhook_url) return;
    try {
      await this.d.enqueueWebhook(row.id);
    } catch (err) {
      log.warn({ err }, 'webhook delivery could not be queued; the sweeper queues it again');
    }
  }

  /** Runs one step with its row in batch_steps; transient failures are retried here. */
  private async step<T>(
    row: WorkflowRow,
    name: string,
    seq: number,
    signal: AbortSignal,
    fn: () => Promise<T>,
    attempts = 2,
  ): Promise<T> {
    for (let attempt = 1; ; attempt++) {
      if (signal.aborted) throw signal.reason;
      await this.d.repo.stepStart(row.id, name, seq);
      const started = performance.now();
      const observe = (status: string) =>
        metrics.stepSeconds.observe(
          { step: metrics.stepKind(name), status },
          (performance.now() - started) / 1000,
        );
      try {
        this.d.hooks?.onStep?.(row.id, name, 'start');
        const out = await fn().finally(() => this.d.hooks?.onStep?.(row.id, name, 'end'));
        await this.d.repo.stepSet(row.id, name, seq, 'complete');
        observe('complete');
        return out;
      } catch (err) {
        const retry =
          !signal.aborted && !(err instanceof PermanentError) && attempt < attempts && isRetryable(err);
        await this.d.repo.stepSet(
          row.id,
          name,
          seq,
          retry ? 'waiting' : 'errored',
          withoutPaths(String((err as Error)?.message ?? err)),
        );
        observe(retry ? 'retried' : 'errored');
        if (!retry) throw err;
        await sleep(Math.min(30_000, 500 * 2 ** (attempt - 1)));
      }
    }
  }

  private async execute(row: WorkflowRow, workDir: string, signal: AbortSignal, log: Logger): Promise<void> {
    const p = row.params;
    const { repo, config } = this.d;
    const store = tenantStore(this.d.store, row.owner_id);
    const prefix = artifactPrefix(p.request_id);
    const prior = row.output ?? {};
    let plan = prior.slice as SlicePlan | undefined;
    let probe = prior.probe as ProbeOutput | undefined;

    // If every chunk of a saved plan is checkpointed, the audio need not be fetched again.
    const checkpoints = new Map<number, ChunkCheckpoint>();
    const loadCheckpoints = async (audioSha: string, slices: Slice[]) => {
      const existing = new Set(await store.list(prefix));
      await Promise.all(
        slices.map(async (s) => {
          const key = `${prefix}chunk_${s.index}.json`;
          if (!existing.has(key)) return;
          const cp = await store.getJson<ChunkCheckpoint>(key);
          if (
            cp &&
            cp.audio_sha256 === audioSha &&
            Math.abs(cp.start - s.start) < 1e-6 &&
            Math.abs(cp.end - s.end) < 1e-6
          ) {
            checkpoints.set(s.index, cp);
          }
        }),
      );
    };
    if (plan && probe) await loadCheckpoints(probe.audio_sha256, plan.slices);
    const needAudio = !plan || !probe || checkpoints.size < plan.slices.length;

    let pcmFile: string | undefined;
    if (needAudio) {
      await fsp.mkdir(workDir, { recursive: true });
      probe = await this.step(row, 'probe', 1, signal, () => this.probe(row, workDir, signal));
      pcmFile = path.join(workDir, 'audio.pcm');
      await repo.saveOutput(row.id, { probe });
    } else {
      await repo.stepReused(row.id, 'probe', 1);
    }
    const probed = probe!;

    if (
      !plan ||
      plan.segment_seconds !== p.segment_seconds ||
      Math.abs(plan.duration - probed.duration_seconds) > 1e-6
    ) {
      plan = await this.step(row, 'slice', 2, signal, async () => {
        const { envelope } = await energyEnvelopeOfFile(pcmFile!);
        return planSlices(envelope, probed.duration_seconds, {
          segmentSeconds: p.segment_seconds,
          maxSearchSeconds: config.sliceSearchSeconds,
        });
      });
      await repo.saveOutput(row.id, { slice: plan });
    } else {
      await repo.stepReused(row.id, 'slice', 2);
    }
    const slicePlan = plan;
    if (needAudio) {
      checkpoints.clear();
      await loadCheckpoints(probed.audio_sha256, slicePlan.slices);
    }

    // ---- transcribe, `concurrency` chunks at a time ----
    const concurrency = Math.max(1, Math.min(Math.floor(p.concurrency) || 1, config.maxConcurrency));
    // Engine calls of this job in flight: `concurrency`, shared by the utterances of every chunk in flight.
    const jobSlots = new Semaphore(concurrency);
    const summaries: ChunkSummary[] = new Array(slicePlan.slices.length);
    const queue = [...slicePlan.slices];
    let transcribedSeconds = 0;
    const worker = async () => {
      for (let s = queue.shift(); s; s = queue.shift()) {
        const slice = s;
        const name = `transcribe_chunk_${slice.index}`;
        const key = `${prefix}chunk_${slice.index}.json`;
        const have = checkpoints.get(slice.index);
        if (have) {
          await repo.stepReused(row.id, name, 100 + slice.index);
          summaries[slice.index] = summarise(have, key, true);
          continue;
        }
        const cp = await this.step(
          row,
          name,
          100 + slice.index,
          signal,
          () => this.transcribeChunk(row, slice, probed, pcmFile!, jobSlots, signal),
          config.chunkAttempts,
        );
        await store.putJson(key, cp);
        checkpoints.set(slice.index, cp);
        transcribedSeconds += slice.end - slice.start;
        summaries[slice.index] = summarise(cp, key, false);
      }
    };
    await Promise.all(Array.from({ length: Math.min(concurrency, slicePlan.slices.length) }, worker));
    if (pcmFile) await fsp.rm(workDir, { recursive: true, force: true }).catch(() => {});
    await repo.saveOutput(row.id, { chunks: summaries });

    // ---- aggregate ----
    const ordered = slicePlan.slices.map((s) => checkpoints.get(s.index)!);
    const result = await this.step(row, 'aggregate', 1000, signal, async () => {
      const r = aggregate(ordered, p, probed.duration_seconds, this.d.defaultModel);
      await store.putJson(`${prefix}result.json`, r);
      return r;
    });
    const aggregateOut = {
      key: `${prefix}result.json`,
      num_segments: result.segments.length,
      text_chars: result.text.length,
    };
    await repo.saveOutput(row.id, { aggregate: aggregateOut });

    // ---- review ----
    let reviewOut: Record<string, unknown> | null = null;
    if (p.review) {
      reviewOut = await this.step(row, 'review', 1100, signal, () =>
        this.review(store, prefix, ordered, result, p, log),
      );
    } else {
      await repo.stepSet(row.id, 'review', 1100, 'skipped');
    }

    // ---- report ----
    const report = await this.step(row, 'report', 1200, signal, async () => {
      const reused = summaries.filter((c) => c.reused).length;
      const engineMs = summaries.reduce((a, c) => a + (c.reused ? 0 : c.engine_ms), 0);
      const artifacts = [
        ...ordered.map((c) => `${prefix}chunk_${c.index}.json`),
        `${prefix}result.json`,
        ...(p.review
          ? [...ordered.map((c) => `${prefix}review_chunk_${c.index}.json`), `${prefix}reviewed_result.json`]
          : []),
      ];
      await removeStaleArtifacts(store, prefix, new Set(artifacts), log);
      const startedAt = (await repo.get(row.id))?.started_at ?? new Date();
      return {
        workflow_id: row.id,
        request_id: p.request_id,
        audio_duration_seconds: probed.duration_seconds,
        chunk_count: ordered.length,
        chunks_transcribed: ordered.length - reused,
        chunks_reused: reused,
        transcribed_audio_seconds: round3(transcribedSeconds),
        engine_ms: Math.round(engineMs),
        wall_ms: Date.now() - startedAt.getTime(),
        runs: row.runs,
        concurrency,
        artifacts,
      };
    });
    // Billed: the audio this workflow had transcribed (any of its runs); chunks reused from an
    // earlier workflow's checkpoints cost no engine time and are not billed again.
    const billed = ordered.filter((c) => c.workflow_id === row.id).reduce((a, c) => a + (c.end - c.start), 0);
    await this.d.ledger.record({
      keyId: row.key_id,
      plane: 'batch',
      audioSeconds: round3(billed),
      refId: row.id,
    });
    await repo.saveOutput(row.id, { review: reviewOut, report, result });
  }

  private async probe(row: WorkflowRow, workDir: string, signal: AbortSignal): Promise<ProbeOutput> {
    const { config } = this.d;
    const p = row.params;
    const source = path.join(workDir, 'source');
    const fetched = await fetchAudio(this.d.outbound, p.audio_url, source, {
      maxBytes: config.maxAudioBytes,
      timeoutMs: config.fetchTimeoutMs,
      signal,
    });
    const pcmFile = path.join(workDir, 'audio.pcm');
    const t0 = Date.now();
    await decodeToPcmFile(source, pcmFile, {
      ffmpegPath: this.d.ffmpegPath,
      timeoutMs: config.decodeTimeoutMs,
      maxSeconds: p.max_audio_seconds,
      signal,
    });
    const decodeMs = Date.now() - t0;
    await fsp.rm(source, { force: true }); // the original is kept only while decoding
    const { envelope, samples, sha256 } = await energyEnvelopeOfFile(pcmFile);
    void envelope;
    const duration = samples / SAMPLE_RATE;
    if (samples === 0) throw new PermanentError('AudioDecodeError', 'The audio contains no samples.');
    if (duration > p.max_audio_seconds) {
      throw new PermanentError(
        'AudioTooLongError',
        `The audio is longer than the plan allows per request (${p.max_audio_seconds} s).`,
      );
    }
    // The plan's rolling audio budget covers batch jobs too (this job is billed when it completes).
    if (p.max_window_seconds !== undefined) {
      const used = await windowUsage(this.d.db, row.key_id, this.d.usageWindowSeconds);
      if (used + duration > p.max_window_seconds) {
        throw new PermanentError(
          'AudioQuotaExceededError',
          `The plan's audio budget of ${p.max_window_seconds} s per window would be exceeded (${Math.round(used)} s used, this audio ${Math.round(duration)} s).`,
        );
      }
    }
    return {
      duration_seconds: round3(duration),
      sample_rate: SAMPLE_RATE,
      audio_bytes: fetched.bytes,
      content_type: fetched.contentType ?? null,
      audio_sha256: sha256,
      fetch_ms: fetched.ms,
      decode_ms: decodeMs,
    };
  }

  /**
   * One chunk: its utterances go to the engine in parallel, within the job's
   * slots (`concurrency`) and the process's engine slots, so that a job's
   * last chunk keeps every slot busy instead of one, and a decoder that is
   * slowed down simply takes fewer utterances. Decoding is per utterance, so
   * the transcript does not depend on which decoder took which.
   */
  private async transcribeChunk(
    row: WorkflowRow,
    slice: Slice,
    probe: ProbeOutput,
    pcmFile: string,
    jobSlots: Semaphore,
    signal: AbortSignal,
  ): Promise<ChunkCheckpoint> {
    const p = row.params;
    const { config } = this.d;
    const { start, end } = sliceByteRange(slice);
    const pcm = await readRange(pcmFile, start, end);
    const seconds = pcm.length / 2 / SAMPLE_RATE;
    const pieces = config.splitUtterances
      ? splitUtterances(energyEnvelope(pcm), seconds, {
          minPauseSeconds: config.utteranceMinPauseSeconds,
          maxUtteranceSeconds: config.utteranceMaxSeconds,
          minUtteranceSeconds: config.utteranceMinSeconds,
        })
      : [{ index: 0, start: 0, end: seconds }];
    this.d.hooks?.onEngineCall?.(row.id, slice.index);
    const segments: ChunkCheckpoint['segments'] = [];
    const words: ChunkCheckpoint['words'] = [];
    const texts: string[] = [];
    let language = p.language ?? '';
    let engineMs = 0;
    let workerId = '';
    // The first failure stops the chunk's other utterances (the step retries the chunk).
    const failed = new AbortController();
    const pieceSignal = AbortSignal.any([signal, failed.signal]);
    // Every utterance waiting for a slot or in the engine listens to it (each removes its listener when done).
    setMaxListeners(0, pieceSignal);
    const results = await Promise.all(
      pieces.map((piece) => {
        const bytes = sliceByteRange(piece);
        return jobSlots
          .run(pieceSignal, () =>
            this.d.engineSlots.run(pieceSignal, () =>
              this.d.speech.transcribe({
                pcm: pcm.subarray(bytes.start, Math.min(bytes.end, pcm.length)),
                language: p.language,
                prompt: p.prompt,
                model: p.model,
                signal: pieceSignal,
                attemptTimeoutMs: engineAttemptTimeoutMs(config, piece.end - piece.start),
              }),
            ),
          )
          .catch((err: unknown) => {
            failed.abort(err);
            throw err;
          });
      }),
    );
    pieces.forEach((piece, i) => {
      const r = results[i];
      engineMs += r.engineMs;
      workerId = r.workerId;
      language ||= r.language;
      if (r.text.trim()) texts.push(r.text.trim());
      for (const s of r.segments)
        segments.push({
          start: piece.start + s.start,
          end: piece.start + s.end,
          text: s.text,
          confidence: s.confidence,
        });
      for (const w of r.words)
        words.push({
          word: w.word,
          start: piece.start + w.start,
          end: piece.start + w.end,
          confidence: w.confidence,
        });
    });
    return {
      index: slice.index,
      start: slice.start,
      end: slice.end,
      audio_sha256: probe.audio_sha256,
      segment_seconds: p.segment_seconds,
      text: texts.join(' '),
      language: language || 'en',
      model: p.model ?? this.d.defaultModel,
      segments,
      words,
      engine_ms: engineMs,
      worker_id: workerId,
      created_at: new Date().toISOString(),
      workflow_id: row.id,
    };
  }

  private async review(
    store: ArtifactStore,
    prefix: string,
    chunks: ChunkCheckpoint[],
    result: BatchResult,
    p: WorkflowParams,
    log: Logger,
  ): Promise<Record<string, unknown>> {
    const { config } = this.d;
    let annotateBy = 'offline';
    const reviews: ChunkReview[] = [];
    for (const c of chunks) {
      let r: ChunkReview | undefined;
      if (this.reviewer.enabledFor('annotate')) {
        try {
          r = await this.reviewer.annotate(c, p.metadata);
          annotateBy = this.reviewer.name;
        } catch (err) {
          log.warn({ err, chunk: c.index }, 'remote reviewer failed; offline annotation used');
        }
      }
      r ??= await annotateChunkOfflineAsync(c, p.metadata, config.review.lowConfidence, {
        maxTerms: config.review.maxTerms,
      });
      await store.putJson(`${prefix}review_chunk_${c.index}.json`, r);
      reviews.push(r);
    }
    let corrected: ReturnType<typeof correctOffline> | undefined;
    let correctBy = 'offline';
    if (this.reviewer.enabledFor('correct')) {
      try {
        corrected = await this.reviewer.correct(result, reviews, p.metadata);
        correctBy = this.reviewer.name;
      } catch (err) {
        log.warn({ err }, 'remote reviewer failed; offline correction used');
      }
    }
    corrected ??= correctOffline(result, reviews);
    const reviewed = {
      ...corrected.result,
      changes: corrected.changes,
      reviewer: { annotate: annotateBy, correct: correctBy },
    };
    await store.putJson(`${prefix}reviewed_result.json`, reviewed);
    return {
      key: `${prefix}reviewed_result.json`,
      chunk_keys: chunks.map((c) => `${prefix}review_chunk_${c.index}.json`),
      issues: reviews.reduce((a, r) => a + r.issues.length, 0),
      changes: corrected.changes.length,
      reviewer: reviewed.reviewer,
    };
  }
}

/**
 * A resubmission of the same request_id may slice differently or drop
 * review: artifacts an earlier run left that this run did not produce
 * (chunk_7 of a finer slicing, review files) would mix two runs under one
 * prefix. They are removed so the prefix holds exactly this run's table (2.5).
 */
async function removeStaleArtifacts(
  store: ArtifactStore,
  prefix: string,
  keep: Set<string>,
  log: Logger,
): Promise<void> {
  const ours = /^(chunk_\d+|review_chunk_\d+|reviewed_result|result)\.json$/;
  for (const key of await store.list(prefix)) {
    if (keep.has(key) || !ours.test(key.slice(prefix.length))) continue;
    await store.delete(key).catch((err) => log.warn({ err, key }, 'stale artifact not removed'));
  }
}

/** A counting semaphore whose waiters can be aborted. */
export class Semaphore {
  private waiters: (() => void)[] = [];
  private free: number;

  constructor(readonly size: number) {
    this.free = size;
  }

  async run<T>(signal: AbortSignal | undefined, fn: () => Promise<T>): Promise<T> {
    if (this.free > 0) this.free--;
    else {
      await new Promise<void>((resolve, reject) => {
        const grant = () => {
          signal?.removeEventListener('abort', onAbort);
          resolve();
        };
        const onAbort = () => {
          this.waiters = this.waiters.filter((w) => w !== grant);
          reject(signal!.reason);
        };
        if (signal?.aborted) return reject(signal.reason);
        signal?.addEventListener('abort', onAbort, { once: true });
        this.waiters.push(grant);
      });
    }
    try {
      return await fn();
    } finally {
      const next = this.waiters.shift();
      if (next) next();
      else this.free++;
    }
  }
}

export interface ProbeOutput {
  duration_seconds: number;
  sample_rate: number;
  audio_bytes: number;
  content_type: string | null;
  audio_sha256: string;
  fetch_ms: number;
  decode_ms: number;
}

function summarise(cp: ChunkCheckpoint, key: string, reused: boolean): ChunkSummary {
  return {
    index: cp.index,
    start: cp.start,
    end: cp.end,
    key,
    reused,
    text_chars: cp.text.length,
    engine_ms: cp.engine_ms,
  };
}

/** A remote pool's per-attempt timeout for a piece of batch audio: it scales with the audio. */
export function engineAttemptTimeoutMs(
  config: Pick<BatchConfig, 'engineTimeoutBaseMs' | 'engineTimeoutPerAudioSecondMs'>,
  seconds: number,
): number {
  return Math.round(config.engineTimeoutBaseMs + config.engineTimeoutPerAudioSecondMs * seconds);
}

/**
 * Our own stores (Postgres, artifact storage) could not be reached: the run
 * pauses and resumes later. The caller's audio URL or the speech engine being
 * unreachable is the job's own failure, retried by its step and then reported.
 */
function isStoreOutage(err: unknown): boolean {
  if (err instanceof OutboundError || err instanceof SpeechError || err instanceof PermanentError)
    return false;
  return isDependencyUnavailable(err);
}

function isRetryable(err: unknown): boolean {
  if (err instanceof SpeechError) return err.retryable;
  return true;
}

/** Chunk transcripts → one transcript on the recording's time line. */
export function aggregate(
  chunks: ChunkCheckpoint[],
  p: Pick<WorkflowParams, 'language' | 'model'>,
  duration: number,
  defaultModel: string,
): BatchResult {
  const segments: ResultSegment[] = [];
  for (const c of chunks) {
    const segs = c.segments.length
      ? c.segments
      : c.text.trim()
        ? [
            {
              start: 0,
              end: c.end - c.start,
              text: c.text,
              confidence: avg(c.words.map((w) => w.confidence)),
            },
          ]
        : [];
    for (const s of segs) {
      const text = s.text.trim();
      if (!text) continue;
      const start = round3(c.start + s.start);
      const end = round3(Math.min(c.end, c.start + s.end));
      segments.push({
        id: segments.length,
        start_time: start,
        end_time: end,
        duration: round3(end - start),
        text,
        confidence: round3(s.confidence),
      });
    }
  }
  const speech = segments.reduce((a, s) => a + s.duration, 0);
  const language = p.language ?? chunks.find((c) => c.language)?.language ?? 'en';
  return {
    text: segments.map((s) => s.text).join(' '),
    segments,
    summary: {
      total_duration: round3(duration),
      total_speech_duration: round3(speech),
      overall_speech_ratio: duration > 0 ? round3(speech / duration) : 0,
      num_segments: segments.length,
    },
    metadata: {
      language,
      model: p.model ?? defaultModel,
      chunk_count: chunks.length,
      audio_duration_seconds: round3(duration),
    },
  };
}

function avg(xs: number[]): number {
  return xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : 0;
}

/**
 * Audio is kept only while a run needs it: work folders of earlier runs of
 * this workflow belong to runs that died (this run holds the lease), so they
 * go before the new run fetches its own copy.
 */
async function removeDeadWorkDirs(
  tmpDir: string,
  workflowId: string,
  own: string,
  log: Logger,
): Promise<void> {
  const names = await fsp.readdir(tmpDir).catch(() => [] as string[]);
  for (const name of names) {
    const dir = path.join(tmpDir, name);
    if (!name.startsWith(`${workflowId}-`) || dir === own) continue;
    await fsp.rm(dir, { recursive: true, force: true });
    log.info({ dir: name }, 'removed the work folder of a dead run');
  }
}
