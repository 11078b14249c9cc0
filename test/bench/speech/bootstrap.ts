/**
 * What a session's normalisation bootstrap adds to the end of its first
 * sentences (issue 21, end of speech -> final p95). Each clip (the six
 * recorded and the generated short corpus) is one session, cut as the
 * realtime tier cuts it; every utterance is fed in 20 ms pieces and each
 * piece's decoder time is measured. Arrival is then replayed at real-time
 * pace on one decoder thread: a piece waits while the thread is busy, so a
 * search from the start that takes longer than the audio it spans leaves a
 * backlog. "end delay" is the time from the utterance's cut (its last
 * sample reaching the decoder) to `end()`'s words: backlog plus the end.
 * PocketSphinx is called directly, so the figures isolate the decoder.
 *
 *   npx tsx test/bench/speech/bootstrap.ts [--cmn=B:P:W:D:T:G:E,...] [--recorded] [--worst=5]
 *
 * `--cmn` as in tail.ts (bootstrap, prior weight, window, lookahead, re-search
 * distance, growth, re-search distance at an utterance's end); default:
 * the current DEFAULT_CMN.
 */
import { performance } from 'node:perf_hooks';
import { initialCmn } from '../../../shared/stt/pocketsphinx/cmn.js';
import { loadClips, pcmOf, wer } from '../../speech/helpers.js';
import { corpusPcm, loadCorpus } from '../../speech/corpus.js';
import { fmt, percentile } from './common.js';
import { CHUNK, i16, streamOf, text, withDecoder, streamingBench } from './cuts.js';

const { opts, cutter, variants } = await streamingBench();
/** `--corpus=DIR`: a held-out corpus (generate.ts --held-out=DIR) instead of the committed one. */
const CORPUS = process.argv.find((a) => a.startsWith('--corpus='))?.slice(9);
const WORST = Number(process.argv.find((a) => a.startsWith('--worst='))?.slice(8) ?? 5);

const items: { name: string; ref: string; stream: Buffer; cuts: [number, number][] }[] = [];
if (!CORPUS)
  for (const c of loadClips())
    items.push({ name: c.file, ref: c.reference, stream: streamOf(pcmOf(c.path)), cuts: [] });
if (!process.argv.includes('--recorded'))
  for (const c of loadCorpus('short', CORPUS))
    items.push({ name: c.file, ref: c.reference, stream: streamOf(corpusPcm(c)), cuts: [] });
for (const it of items) it.cuts = await cutter.cuts(it.stream);

const SAMPLE_MS = 1000 / 16000;
interface End {
  clip: string;
  index: number;
  seconds: number;
  /** Cut -> words (ms), replayed at real-time pace. */
  delay: number;
  /** The longest single piece (ms): a search from the start. */
  longest: number;
  restarts: number;
  /** Frames searched again at the end (the utterance's tail). */
  tail: number;
}

const words = items.reduce((n, it) => n + it.ref.split(/\s+/).length, 0);
console.log(
  '| B:P:W:D:T:G:E | WER | all ends: delay p50 / p95 / max | first utterances: p50 / p95 / max | restarts | ms searched (all pieces) |',
);
console.log('|---|---|---|---|---|---|');
const worstOut: string[] = [];
for (const v of variants) {
  const label = `${v.bootstrapFrames}:${v.priorFrames}:${v.window}:${v.lookaheadFrames}:${v.researchDistance}:${v.researchGrowth}:${v.settleDistance}`;
  const ends: End[] = [];
  let busyTotal = 0;
  let errs = 0;
  withDecoder({ ...opts, sessionCmn: v }, (d) => {
    for (const it of items) {
      const est = initialCmn();
      // Decoder time of every piece, in session time order; the thread is replayed across utterances.
      let freeAt = 0;
      const hyp = it.cuts.map(([a, e], index) => {
        const pcm = i16(it.stream.subarray(a, e));
        const t0 = (a / 2) * SAMPLE_MS;
        let longest = 0;
        d.begin(est);
        const trace = d.cmnTrace!;
        for (let i = 0; i < pcm.length; i += CHUNK) {
          const piece = pcm.subarray(i, i + CHUNK);
          const arrives = t0 + (i + piece.length) * SAMPLE_MS;
          const s = performance.now();
          d.feed(piece);
          const took = performance.now() - s;
          longest = Math.max(longest, took);
          busyTotal += took;
          freeAt = Math.max(freeAt, arrives) + took;
        }
        const cutAt = t0 + pcm.length * SAMPLE_MS;
        const s = performance.now();
        const out = text(d.end());
        const took = performance.now() - s;
        busyTotal += took;
        freeAt = Math.max(freeAt, cutAt) + took;
        ends.push({
          clip: it.name,
          index,
          seconds: pcm.length / 16000,
          delay: freeAt - cutAt,
          longest,
          restarts: trace.restarts,
          tail: trace.tail,
        });
        return out;
      });
      errs += wer(it.ref, hyp.join(' ')) * it.ref.split(/\s+/).length;
    }
  });
  const stat = (xs: number[]) =>
    `${fmt(percentile(xs, 50), 0)} / ${fmt(percentile(xs, 95), 0)} / ${fmt(Math.max(...xs), 0)} ms`;
  const firsts = ends.filter((e) => e.index === 0);
  console.log(
    `| ${label} | ${fmt((errs / words) * 100)}% | ${stat(ends.map((e) => e.delay))} | ${stat(firsts.map((e) => e.delay))} | ` +
      `${ends.reduce((n, e) => n + e.restarts, 0)} | ${fmt(busyTotal, 0)} |`,
  );
  worstOut.push(
    `\n${label}: slowest ends`,
    ...[...ends]
      .sort((a, b) => b.delay - a.delay)
      .slice(0, WORST)
      .map(
        (e) =>
          `  ${e.clip} #${e.index} (${fmt(e.seconds, 2)} s): delay ${fmt(e.delay, 0)} ms, longest piece ${fmt(e.longest, 0)} ms, restarts ${e.restarts}, tail ${e.tail} frames`,
      ),
  );
}
console.log(worstOut.join('\n'));
process.exit(0);
