/**
 * Worker-thread entry of the streaming form: owns up to `decoders`
 * PocketSphinx decoders (created when first needed, then kept) and the
 * feature-normalisation estimates of the realtime sessions homed here.
 * Messages are handled in the order they were posted, so a session's
 * utterances see its estimate in audio order, whatever the timing.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { performance } from 'node:perf_hooks';
import { initialCmn, type CmnEstimate, type CmnSettings } from './cmn.js';
import { Decoder, type DecoderOptions, type RecognizedWord } from './decoder.js';
import type { BiasSpec } from '../bias/compile.js';
import type { SentenceEndCues } from '../types.js';

export interface StreamThreadData extends DecoderOptions {
  sessionCmn: CmnSettings;
  /** Decoders created at start (the rest on demand). */
  warm: number;
}

export type ToStreamThread =
  | { type: 'begin'; utt: number; stream: number; bias?: BiasSpec }
  | { type: 'feed'; utt: number; pcm: ArrayBuffer }
  | { type: 'end'; utt: number }
  /** How likely the words so far end a sentence (answered with `sentenceEnd`). */
  | { type: 'sentenceEnd'; utt: number; req: number }
  | { type: 'cancel'; utt: number }
  | { type: 'forget'; stream: number }
  | { type: 'close' };

export type FromStreamThread =
  | { type: 'ready'; initMs: number }
  | { type: 'result'; utt: number; words: RecognizedWord[]; decodeMs: number }
  | { type: 'failed'; utt: number; message: string }
  | { type: 'sentenceEnd'; req: number; cues: SentenceEndCues };

const port = parentPort!;
const opts = workerData as StreamThreadData;
const started = performance.now();
const idle: Decoder[] = [];
for (let i = 0; i < opts.warm; i++) idle.push(new Decoder(opts));
/** Open utterances, and why those that failed did (reported at their end). */
const open = new Map<number, Decoder>();
const failed = new Map<number, string>();
const estimates = new Map<number, CmnEstimate>();
port.postMessage({
  type: 'ready',
  initMs: Math.round(performance.now() - started),
} satisfies FromStreamThread);

/**
 * An idle decoder, preferring one that applies the spec at the least cost (it holds the spec, or its
 * words): a new word rebuilds a decoder's search tree, which holds up every session homed here.
 */
function takeIdle(bias: BiasSpec | undefined): Decoder | undefined {
  let best = -1;
  for (let i = 0; i < idle.length; i++)
    if (best < 0 || idle[i].biasCost(bias) < idle[best].biasCost(bias)) best = i;
  if (best < 0) return undefined;
  const [dec] = idle.splice(best, 1);
  if (!dec.wornOut) return dec;
  dec.close();
  return new Decoder(opts);
}

function release(utt: number): void {
  const dec = open.get(utt);
  open.delete(utt);
  if (!dec) return;
  try {
    dec.end();
    idle.push(dec);
  } catch {
    dec.close();
  }
}

function fail(utt: number, err: unknown): void {
  open.get(utt)?.close();
  open.delete(utt);
  failed.set(utt, (err as Error).message);
}

port.on('message', (m: ToStreamThread) => {
  switch (m.type) {
    case 'begin': {
      let est = estimates.get(m.stream);
      if (!est) estimates.set(m.stream, (est = initialCmn()));
      try {
        const dec = takeIdle(m.bias) ?? new Decoder(opts);
        open.set(m.utt, dec);
        dec.bias(m.bias);
        dec.begin(est);
      } catch (err) {
        fail(m.utt, err);
      }
      return;
    }
    case 'feed': {
      const dec = open.get(m.utt);
      if (!dec) return;
      try {
        dec.feed(new Int16Array(m.pcm));
      } catch (err) {
        fail(m.utt, err);
      }
      return;
    }
    case 'end': {
      const dec = open.get(m.utt);
      open.delete(m.utt);
      const why = failed.get(m.utt);
      failed.delete(m.utt);
      if (why !== undefined || !dec) {
        port.postMessage({
          type: 'failed',
          utt: m.utt,
          message: why ?? 'unknown utterance',
        } satisfies FromStreamThread);
        return;
      }
      const t0 = performance.now();
      try {
        const words = dec.end();
        idle.push(dec);
        port.postMessage({
          type: 'result',
          utt: m.utt,
          words,
          decodeMs: performance.now() - t0,
        } satisfies FromStreamThread);
      } catch (err) {
        dec.close();
        port.postMessage({
          type: 'failed',
          utt: m.utt,
          message: (err as Error).message,
        } satisfies FromStreamThread);
      }
      return;
    }
    case 'sentenceEnd': {
      let cues: SentenceEndCues = { probability: 0, order: 0, words: [] };
      try {
        cues = open.get(m.utt)?.sentenceEnd() ?? cues;
      } catch {
        // A decoder that cannot say keeps the silence window.
      }
      port.postMessage({ type: 'sentenceEnd', req: m.req, cues } satisfies FromStreamThread);
      return;
    }
    case 'cancel':
      failed.delete(m.utt);
      return release(m.utt);
    case 'forget':
      estimates.delete(m.stream);
      return;
    case 'close':
      for (const utt of [...open.keys()]) release(utt);
      for (const dec of idle.splice(0)) dec.close();
      port.close();
  }
});
