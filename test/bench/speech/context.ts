/**
 * What a realtime utterance would gain from knowing more than a live stream
 * knows (issue 21, "no clip more than 5 points worse than the whole clip").
 * Each generated clip is cut as the realtime tier cuts it and its utterances
 * are searched in the streaming form with the session's estimate, as the
 * realtime tier does, in variants:
 * - `--ctx=0,800,1500,all`: the search first hears this much of the previous
 *   utterance's end (ms; `all`: the whole utterance), so the language model
 *   carries the words before the cut; words in that context are dropped;
 * - `--oracle`: the normalisation estimate is the one the session reaches at
 *   its end (audio not yet spoken included), not the running one.
 * Each variant is compared per clip with the whole-clip decode, as
 * `npm run bench:wer` compares the planes. PocketSphinx is called directly.
 *
 *   npx tsx test/bench/speech/context.ts [--ctx=0,800,1500,all] [--oracle]
 */
import { loadConfig } from '../../../shared/config/index.js';
import { initialCmn, type CmnEstimate } from '../../../shared/stt/pocketsphinx/cmn.js';
import { Decoder, type RecognizedWord } from '../../../shared/stt/pocketsphinx/decoder.js';
import { wer } from '../../speech/helpers.js';
import { corpusPcm, loadCorpus } from '../../speech/corpus.js';
import { fmt } from './common.js';
import { CHUNK, RealtimeCutter, decoderOptions, i16, streamOf, text } from './cuts.js';

const config = loadConfig({});
const arg = process.argv.find((a) => a.startsWith('--ctx='))?.slice(6) ?? '0,800,1500,all';
const CONTEXTS = arg.split(',').map((x) => (x === 'all' ? Infinity : Number(x)));
const ORACLE = process.argv.includes('--oracle');
const clips = loadCorpus('short');
const cutter = await RealtimeCutter.create(config);
const whole = new Decoder(decoderOptions(config));
const dec = new Decoder({ ...decoderOptions(config, true), sessionCmn: config.speech.builtin.streamCmn });
const copy = (e: CmnEstimate): CmnEstimate => ({ sum: [...e.sum], frames: e.frames, ready: e.ready });
// The decoder's words carry no fillers and no pronunciation marks (`word(2)`).
const spoken = (ws: RecognizedWord[]) => ws.map((w) => w.word);

/** Searches `pcm` with `est` (which it updates); the words' frames count from the start of `pcm`. */
function search(est: CmnEstimate, pcm: Int16Array): RecognizedWord[] {
  dec.begin(est);
  for (let k = 0; k < pcm.length; k += CHUNK) dec.feed(pcm.subarray(k, k + CHUNK));
  return dec.end();
}

const base: number[] = [];
const results = new Map<number, number[]>(CONTEXTS.map((c) => [c, []]));
for (const c of clips) {
  const pcm = corpusPcm(c);
  base.push(wer(c.reference, text(whole.decode(i16(pcm)))));
  const stream = streamOf(pcm);
  const cuts = await cutter.cuts(stream);
  const atEnd = initialCmn();
  if (ORACLE) for (const [a, e] of cuts) search(atEnd, i16(stream.subarray(a, e)));
  for (const ctx of CONTEXTS) {
    const session = ORACLE ? copy(atEnd) : initialCmn();
    const out: string[] = [];
    cuts.forEach(([a, e], i) => {
      const utterance = stream.subarray(a, e);
      if (ctx === 0 || i === 0) return out.push(...spoken(search(session, i16(utterance))));
      // The context is searched with a copy of the estimate; the session's own moves as the tier's does.
      const [pa, pe] = cuts[i - 1];
      const n = Math.min(pe - pa, Math.round((ctx * 32) / 320) * 320);
      const frames = n / 320;
      const heard = search(copy(session), i16(Buffer.concat([stream.subarray(pe - n, pe), utterance])));
      out.push(...spoken(heard.filter((w) => (w.startFrame + w.endFrame) / 2 >= frames)));
      search(session, i16(utterance));
    });
    results.get(ctx)!.push(wer(c.reference, out.join(' ')));
  }
}
const n = clips.map((c) => c.reference.split(' ').length);
const total = n.reduce((a, b) => a + b, 0);
const weighted = (xs: number[]) => (100 * xs.reduce((a, x, i) => a + x * n[i], 0)) / total;
console.log(
  `${clips.length} clips; whole-clip decode ${fmt(weighted(base))}%${ORACLE ? '; estimate: the session end' : ''}\n`,
);
console.log('| context before each cut | WER | worst clip vs whole | clips > +5 | clips < -5 |');
console.log('|---|---|---|---|---|');
for (const [ctx, w] of results) {
  const d = w.map((x, i) => x - base[i]);
  console.log(
    `| ${ctx === Infinity ? 'the whole previous utterance' : `${ctx} ms`} | ${fmt(weighted(w))}% | +${fmt(100 * Math.max(...d))} | ${d.filter((x) => x > 0.05 + 1e-9).length} | ${d.filter((x) => x < -0.05 - 1e-9).length} |`,
  );
}
whole.close();
dec.close();
process.exit(0);
