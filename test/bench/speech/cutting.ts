/**
 * Why cut utterances lose words (issue 13): each hypothesis measured on the
 * clips of test/audio, PocketSphinx called directly (no service).
 * The utterances are the realtime segmenter's (silero VAD, default
 * settings) over 300 ms silence + clip + 900 ms silence, as the realtime
 * tests stream them; batch's splitUtterances cuts are measured too.
 *
 *   npx tsx test/bench/speech/cutting.ts
 *
 * Rows (word-weighted WER over the clips, and the worst clip's excess over
 * the whole-clip decode):
 * - whole clip, batch CMN (the segment endpoint);
 * - cut, batch CMN per utterance (what realtime and batch did);
 * - cut with more padding before/after;
 * - cut, live CMN from the model's prior, a fresh estimate per utterance;
 * - cut, live CMN carried from utterance to utterance (one decoder per clip);
 * - whole clip, live CMN (streaming, no cuts).
 */
import { loadConfig } from '../../../shared/config/index.js';
import { DEFAULT_CMN, initialCmn } from '../../../shared/stt/pocketsphinx/cmn.js';
import { energyEnvelope, splitUtterances } from '../../../shared/audio/slicing.js';
import { loadClips, pcmOf, wer } from '../../speech/helpers.js';
import { fmt } from './common.js';
import {
  RealtimeCutter,
  decoderOptions,
  i16,
  streamOf,
  streamed,
  text,
  withDecoder,
  cmnVariants,
} from './cuts.js';

const config = loadConfig({});
const opts = decoderOptions(config);
const cutter = await RealtimeCutter.create(config);

function batchCuts(stream: Buffer): [number, number][] {
  const seconds = stream.length / 32000;
  return splitUtterances(energyEnvelope(stream), seconds, {
    minPauseSeconds: config.batch.utteranceMinPauseSeconds,
    maxUtteranceSeconds: config.batch.utteranceMaxSeconds,
  }).map((s) => [Math.round(s.start * 16000) * 2, Math.round(s.end * 16000) * 2]);
}

const pad = (cuts: [number, number][], len: number, ms: number): [number, number][] =>
  cuts.map(([a, e]) => [Math.max(0, a - ms * 32), Math.min(len, e + ms * 32)]);

const clips = loadClips();
/** `--cmn=150:100:3000,...`: session CMN settings to try (bootstrap : prior : window : lookahead : re-search distance). */
const variantsToTry = cmnVariants(DEFAULT_CMN);
interface Input {
  pcm: Buffer;
  stream: Buffer;
  cuts: [number, number][];
  batch: [number, number][];
}
/** One decoder per hypothesis and clip unless said otherwise; clips in refs.tsv order. */
const hypotheses: [string, (x: Input) => string][] = [
  ['whole clip, batch CMN (segment endpoint)', (x) => withDecoder(opts, (d) => text(d.decode(i16(x.pcm))))],
  [
    'realtime cuts, batch CMN per utterance (before)',
    (x) =>
      withDecoder(opts, (d) =>
        x.cuts.map(([a, e]) => text(d.decode(i16(x.stream.subarray(a, e))))).join(' '),
      ),
  ],
  [
    'realtime cuts +300 ms each side, batch CMN',
    (x) =>
      withDecoder(opts, (d) =>
        pad(x.cuts, x.stream.length, 300)
          .map(([a, e]) => text(d.decode(i16(x.stream.subarray(a, e)))))
          .join(' '),
      ),
  ],
  [
    'batch cuts, batch CMN per utterance (before)',
    (x) =>
      withDecoder(opts, (d) => x.batch.map(([a, e]) => text(d.decode(i16(x.pcm.subarray(a, e))))).join(' ')),
  ],
  ['whole clip, PocketSphinx live CMN (streamed)', (x) => withDecoder(opts, (d) => streamed(d, x.pcm))],
  [
    'realtime cuts, PocketSphinx live CMN, fresh decoder per utterance',
    (x) => x.cuts.map(([a, e]) => withDecoder(opts, (d) => streamed(d, x.stream.subarray(a, e)))).join(' '),
  ],
  [
    'realtime cuts, PocketSphinx live CMN carried across the clip',
    (x) => withDecoder(opts, (d) => x.cuts.map(([a, e]) => streamed(d, x.stream.subarray(a, e))).join(' ')),
  ],
  ...variantsToTry.flatMap((cmn): [string, (x: Input) => string][] => {
    const o = { ...opts, sessionCmn: cmn };
    const label = `session CMN (bootstrap ${cmn.bootstrapFrames}, prior ${cmn.priorFrames}, window ${cmn.window}, lookahead ${cmn.lookaheadFrames} frames, re-search over ${cmn.researchDistance})`;
    return [
      [`whole clip, ${label}`, (x) => withDecoder(o, (d) => streamed(d, x.pcm, initialCmn()))],
      [
        `realtime cuts, ${label} carried across the clip`,
        (x) =>
          withDecoder(o, (d) => {
            const est = initialCmn();
            return x.cuts.map(([a, e]) => streamed(d, x.stream.subarray(a, e), est)).join(' ');
          }),
      ],
      [
        `batch cuts, ${label} carried across the clip`,
        (x) =>
          withDecoder(o, (d) => {
            const est = initialCmn();
            return x.batch.map(([a, e]) => streamed(d, x.pcm.subarray(a, e), est)).join(' ');
          }),
      ],
    ];
  }),
];
const only = process.argv.find((a) => a.startsWith('--only='))?.slice(7);
const rows = hypotheses
  .filter(([name], i) => i === 0 || !only || name.includes(only))
  .map(([name, run]) => ({ name, run, texts: [] as string[] }));
const cutsInfo: string[] = [];
for (const c of clips) {
  const pcm = pcmOf(c.path);
  const stream = streamOf(pcm);
  const x: Input = { pcm, stream, cuts: await cutter.cuts(stream), batch: batchCuts(pcm) };
  cutsInfo.push(`${c.file}: realtime ${x.cuts.length} utterances, batch ${x.batch.length}`);
  for (const r of rows) r.texts.push(r.run(x));
}

const nWords = clips.map((c) => c.reference.split(/\s+/).length);
const total = nWords.reduce((a, x) => a + x, 0);
const werOf = (r: { texts: string[] }) => r.texts.map((t, i) => wer(clips[i].reference, t));
const base = werOf(rows[0]);
console.log(cutsInfo.join('\n'));
console.log(
  `\n| hypothesis | WER (word-weighted) | worst clip vs whole | ${clips.map((c) => c.file.replace('.wav', '')).join(' | ')} |`,
);
console.log(`|---|---|---|${clips.map(() => '---').join('|')}|`);
for (const r of rows) {
  const w = werOf(r);
  const weighted = w.reduce((a, x, i) => a + x * nWords[i], 0) / total;
  const worst = Math.max(...w.map((x, i) => x - base[i]));
  console.log(
    `| ${r.name} | ${fmt(weighted * 100)}% | ${worst >= 0 ? '+' : ''}${fmt(worst * 100)} | ${w.map((x) => fmt(x * 100)).join(' | ')} |`,
  );
}
if (process.argv.includes('--texts'))
  for (const r of rows)
    console.log(`\n${r.name}\n${r.texts.map((t, i) => `  ${clips[i].file}: ${t}`).join('\n')}`);
process.exit(0);
