/**
 * Runs one step with its row in batch_steps (running, then complete,
 * waiting for a retry, or errored) and its duration metric; transient
 * failures are retried here with exponential backoff.
 */
import { SpeechError } from '../../../shared/stt/types.js';
import { PermanentError, withoutPaths } from '../errors.js';
import * as metrics from '../metrics.js';
import type { StepRef } from '../steps/order.js';
import type { RunContext } from './context.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export async function runStep<T>(
  ctx: RunContext,
  step: StepRef,
  fn: () => Promise<T>,
  attempts = 2,
): Promise<T> {
  const { row, signal } = ctx;
  const { repo, hooks } = ctx.d;
  for (let attempt = 1; ; attempt++) {
    if (signal.aborted) throw signal.reason;
    await repo.stepStart(row.id, step);
    const started = performance.now();
    const observe = (status: string) =>
      metrics.stepSeconds.observe(
        { step: metrics.stepKind(step.name), status },
        (performance.now() - started) / 1000,
      );
    try {
      hooks?.onStep?.(row.id, step.name, 'start');
      const out = await fn().finally(() => hooks?.onStep?.(row.id, step.name, 'end'));
      await repo.stepSet(row.id, step, 'complete');
      observe('complete');
      return out;
    } catch (err) {
      const retry =
        !signal.aborted && !(err instanceof PermanentError) && attempt < attempts && isRetryable(err);
      await repo.stepSet(
        row.id,
        step,
        retry ? 'waiting' : 'errored',
        withoutPaths(String((err as Error)?.message ?? err)),
      );
      observe(retry ? 'retried' : 'errored');
      if (!retry) throw err;
      await sleep(Math.min(30_000, 500 * 2 ** (attempt - 1)));
    }
  }
}

function isRetryable(err: unknown): boolean {
  if (err instanceof SpeechError) return err.retryable;
  return true;
}
