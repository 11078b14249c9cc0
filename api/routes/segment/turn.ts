/**
 * Clip work (decode and engine) of this process shared fairly between keys
 * (issue 41: one key holding 20 uploads in flight took another tenant's
 * 11 s clip from 2.9 s to 15.6–29.5 s): a clip takes its key's turn in a
 * FairShare (shared/fairShare.ts), waiting at most as long as for a decoder.
 */
import { DECODE_QUEUE_MS } from '../../../shared/transcribe/clip.js';
import { HttpRefusal } from '../../../shared/http/refusal.js';
import type { FairShare } from '../../../shared/fairShare.js';

/** How long a clip may wait behind its own key's clips (it queues behind itself, not behind the server). */
export const OWN_LINE_MS = 120_000;

/**
 * Runs `fn` in `key`'s turn. Waiting for a server that is full is bounded
 * by DECODE_QUEUE_MS (then 503 `engine_overloaded` with Retry-After, as for
 * a decoder that does not become free); waiting only behind the key's own
 * clips (its share held, slots free for others), by OWN_LINE_MS. The client
 * leaving ends the wait at once.
 */
export async function inTurn<T>(
  share: FairShare,
  key: string,
  signal: AbortSignal,
  fn: () => Promise<T>,
  waits: { queueMs: number; ownLineMs: number } = { queueMs: DECODE_QUEUE_MS, ownLineMs: OWN_LINE_MS },
): Promise<T> {
  const wait = new AbortController();
  const since = Date.now();
  const check = () => {
    if (share.overShare(key) && Date.now() - since < waits.ownLineMs)
      timer = setTimeout(check, waits.queueMs);
    else wait.abort(new DOMException('clip slot wait timed out', 'TimeoutError'));
  };
  let timer = setTimeout(check, waits.queueMs);
  const onClientGone = () => wait.abort(signal.reason);
  signal.addEventListener('abort', onClientGone, { once: true });
  const stopWaiting = () => {
    clearTimeout(timer);
    signal.removeEventListener('abort', onClientGone);
  };
  let started = false;
  try {
    return await share.run(key, wait.signal, () => {
      started = true;
      stopWaiting();
      return fn();
    });
  } catch (err) {
    if (!started && err === wait.signal.reason && !signal.aborted)
      throw new HttpRefusal(
        503,
        'engine_overloaded',
        // The wait it had: behind its own key's clips up to ownLineMs, not queueMs.
        `No transcription slot became free within ${Math.round((Date.now() - since) / 1000)} s (one key holds at most ${share.perKey} of this server's ${share.size} at once).`,
        { retryable: true, headers: { 'Retry-After': '2' } },
      );
    throw err;
  } finally {
    stopWaiting();
  }
}
