/**
 * The tail of a streamed utterance (issue 13): what is left to search when
 * the utterance ends, per session-CMN setting. Each clip is one session
 * (fresh estimate), cut as the realtime tier cuts it; every utterance is fed
 * in 20 ms pieces (the search runs as they arrive), then `end()` is timed:
 * that is the decoder's share of speech_stopped -> completed. PocketSphinx is
 * called directly (no service), so the figures isolate the decoder.
 *
 *   npx tsx test/bench/speech/tail.ts [--cmn=B:P:W:D:T:G,...] [--texts] [--repeat=3]
 *
 * B bootstrap frames, P prior weight, W window, D lookahead frames, T
 * re-search distance (`inf`: never), G growth between searches from the start;
 * defaults: the current DEFAULT_CMN. "frames searched": provisional frames
 * (searches from the start included), the CPU the bootstrap costs.
 */
import { performance } from 'node:perf_hooks';
import { initialCmn } from '../../../shared/stt/pocketsphinx/cmn.js';
import { loadClips, pcmOf, wer } from '../../speech/helpers.js';
import { fmt, percentile } from './common.js';
import { CHUNK, decoderOptions, i16, streamOf, text, withDecoder, streamingBench } from './cuts.js';

const { config, opts, cutter, variants } = await streamingBench();
const REPEAT = Number(process.argv.find((a) => a.startsWith('--repeat='))?.slice(9) ?? 3);
/** `--lead-ms=100`: each cut starts this much earlier (more audio before the speech). */
const LEAD = Number(process.argv.find((a) => a.startsWith('--lead-ms='))?.slice(10) ?? 0) * 32;
const clips = loadClips();
const inputs: { stream: Buffer; cuts: [number, number][] }[] = [];
for (const c of clips) {
  const stream = streamOf(pcmOf(c.path));
  const cuts = await cutter.cuts(stream);
  inputs.push({ stream, cuts: cuts.map(([a, e]): [number, number] => [Math.max(0, a - LEAD), e]) });
}
const whole = withDecoder(decoderOptions(config), (d) =>
  inputs.map((_, i) => text(d.decode(i16(pcmOf(clips[i].path))))),
);

interface Utt {
  clip: number;
  index: number;
  seconds: number;
  endMs: number;
  feedMs: number;
  provisional: number;
  moved: number;
  restarts: number;
  tail: number;
}

const nWords = clips.map((c) => c.reference.split(/\s+/).length);
const total = nWords.reduce((a, x) => a + x, 0);
const baseWer = whole.map((t, i) => wer(clips[i].reference, t));
const label = (v: (typeof variants)[number]) =>
  `${v.bootstrapFrames}:${v.priorFrames}:${v.window}:${v.lookaheadFrames}:${v.researchDistance}:${v.researchGrowth}`;

console.log(
  `| B:P:W:D:T:G | WER | worst clip vs whole | ${clips.map((c) => c.file.replace('.wav', '').replace('librispeech-', 'ls-').replace('librivox-', '')).join(' | ')} | end() p50 | first utterances: end() / frames left / restarts | restarts | frames searched | drift at the end (max) |`,
);
console.log(`|---|---|---|${clips.map(() => '---').join('|')}|---|---|---|---|---|`);
const textsOut: string[] = [];
for (const v of variants) {
  const o = { ...opts, sessionCmn: v };
  // Repeated runs: the same words each time; the timings take the median per utterance.
  const runs: { texts: string[]; utts: Utt[] }[] = [];
  for (let r = 0; r < REPEAT; r++)
    runs.push(
      withDecoder(o, (d) => {
        const utts: Utt[] = [];
        const texts = inputs.map((x, ci) => {
          const est = initialCmn();
          return x.cuts
            .map(([a, e], index) => {
              const pcm = i16(x.stream.subarray(a, e));
              const t0 = performance.now();
              d.begin(est);
              const trace = d.cmnTrace!;
              for (let i = 0; i < pcm.length; i += CHUNK) d.feed(pcm.subarray(i, i + CHUNK));
              const t1 = performance.now();
              const words = text(d.end());
              const t2 = performance.now();
              utts.push({
                clip: ci,
                index,
                seconds: pcm.length / 16000,
                endMs: t2 - t1,
                feedMs: t1 - t0,
                ...trace,
              });
              return words;
            })
            .join(' ');
        });
        return { texts, utts };
      }),
    );
  const texts = runs[0].texts;
  const same = runs.every((r) => r.texts.every((t, i) => t === texts[i]));
  const utts = runs[0].utts.map((u, k) => ({
    ...u,
    endMs: percentile(
      runs.map((r) => r.utts[k].endMs),
      50,
    ),
    feedMs: percentile(
      runs.map((r) => r.utts[k].feedMs),
      50,
    ),
  }));
  const w = texts.map((t, i) => wer(clips[i].reference, t));
  const weighted = w.reduce((a, x, i) => a + x * nWords[i], 0) / total;
  const worst = Math.max(...w.map((x, i) => x - baseWer[i]));
  const firsts = utts.filter((u) => u.index === 0);
  console.log(
    `| ${label(v)}${same ? '' : ' (texts differ between runs!)'} | ${fmt(weighted * 100)}% | ${worst >= 0 ? '+' : ''}${fmt(worst * 100)} | ${w.map((x) => fmt(x * 100)).join(' | ')} | ` +
      `${fmt(
        percentile(
          utts.map((u) => u.endMs),
          50,
        ),
        0,
      )} ms | ${firsts.map((u) => `${fmt(u.endMs, 0)} ms/${u.tail} fr${u.restarts ? `/${u.restarts}re` : ''}`).join(', ')} | ` +
      `${utts.reduce((n, u) => n + u.restarts, 0)} | ${utts.reduce((n, u) => n + u.provisional, 0)} | ${fmt(Math.max(...utts.map((u) => u.moved)), 2)} |`,
  );
  textsOut.push(`\n${label(v)}\n${texts.map((t, i) => `  ${clips[i].file}: ${t}`).join('\n')}`);
  if (process.argv.includes('--detail'))
    for (const u of utts)
      textsOut.push(
        `  ${clips[u.clip].file} #${u.index} ${fmt(u.seconds, 2)} s: feed ${fmt(u.feedMs, 0)} ms (RTF ${fmt(u.feedMs / 1000 / u.seconds, 3)}), end ${fmt(u.endMs, 0)} ms, tail ${u.tail} frames, provisional ${u.provisional}, drift ${fmt(u.moved, 2)}, restarts ${u.restarts}`,
      );
}
console.log(`\nwhole clip (clip form, batch CMN): ${baseWer.map((x) => fmt(x * 100)).join(' / ')}`);
if (process.argv.includes('--texts') || process.argv.includes('--detail')) console.log(textsOut.join('\n'));
process.exit(0);
