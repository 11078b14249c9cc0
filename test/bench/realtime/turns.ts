/**
 * Turn ends on the turn corpus (issue 38; test/audio/corpus/dialog.ts): per
 * eagerness level, the share of sentences split (a turn end inside a
 * sentence), the share of turns merged (two sentences one second apart in one
 * final), end of speech -> final p50 / p95 / max (a sentence's last sample,
 * sent at real-time pace in 20 ms frames, to its `completed` event) and the
 * word error rate, on one stream and on `--streams` at once (one instance's
 * admitted load). The realtime server runs in this process with the built-in
 * engine's streaming form, as the realtime instances do.
 *
 *   npx tsx test/bench/realtime/turns.ts                        # low, medium, high; 1 and 5 streams
 *   npx tsx test/bench/realtime/turns.ts --levels=medium --pace=0   # splits and merges only, fast
 *   --corpus=/tmp/dh: the held-out part (npx tsx test/audio/corpus/dialog.ts --held-out=/tmp/dh)
 *   --levels=default: no session.update (the session's defaults; what an older server does)
 *   --clips=N: the first N clips; --detail: each turn end (stderr)
 *   --cues=FILE: every judged pause's cues (the server's debug `turn end judged` records) as TSV,
 *     labelled `mid` (inside a sentence) or `end` (after its last word): data to tune readPause on
 *
 * With `--pace=0` the audio goes as fast as the server takes it: splits and
 * merges are the same (the segmenter waits for each verdict), but no latency
 * can be read (a stop's `audio_end_ms` is the padded end of speech, not where
 * the wait ended): those columns print `-`; measure them at `--pace=1`.
 */
import fs from 'node:fs';
import path from 'node:path';
import os from 'node:os';
import { loadConfig } from '../../../shared/config/index.js';
import { createLogger } from '../../../shared/logger.js';
import { BuiltinEngine } from '../../../shared/stt/builtin.js';
import { corpusPcm, percentile, CORPUS_DIR, type CorpusClip } from '../../speech/corpus.js';
import { wer } from '../../speech/helpers.js';
import { createRealtimeContext, connect, bearer } from '../../realtime/helpers.js';

const arg = (name: string, dflt: string) =>
  process.argv.find((a) => a.startsWith(`--${name}=`))?.split('=')[1] ?? dflt;
const LEVELS = arg('levels', 'low,medium,high').split(',');
const PACE = Number(arg('pace', '1'));
const STREAMS = arg('streams', '1,5').split(',').map(Number);
const DIR = arg('corpus', CORPUS_DIR);
const DETAIL = process.argv.includes('--detail');
const CUES = arg('cues', '');
const CUE_FIELDS = ['reading', 'waitMs', 'p', 'order', 'last', 'pitchSt', 'energyDb', 'speakerPauseMs'];
const cueRows: string[] = [['clip', 'level', 'atMs', 'label', ...CUE_FIELDS].join('\t')];
const COMPLETED = 'conversation.item.input_audio_transcription.completed';
const STOPPED = 'input_audio_buffer.speech_stopped';

interface Clip {
  file: string;
  /** Each sentence's speech (seconds) and the starts of the pauses the corpus made inside it. */
  turns: { text: string; start: number; end: number; pauses: number[] }[];
}
const clips: Clip[] = fs
  .readFileSync(path.join(DIR, 'dialog.tsv'), 'utf8')
  .trim()
  .split('\n')
  .slice(1)
  .map((row) => {
    const [file, , , texts, speech, pauses] = row.split('\t');
    const spans = speech.split(' ').map((s) => s.split('-').map(Number));
    const inner = (pauses ?? '')
      .split(';')
      .map((t) => (t ? t.split(',').map((p) => Number(p.split('-')[0])) : []));
    return {
      file,
      turns: texts.split(' / ').map((text, i) => ({
        text,
        start: spans[i][0],
        end: spans[i][1],
        pauses: inner[i] ?? [],
      })),
    };
  })
  .slice(0, Number(arg('clips', '1000')));

interface Outcome {
  turns: number;
  split: number;
  pairs: number;
  merged: number;
  /** End of speech -> final (ms; at real-time pace only). */
  latency: number[];
  errors: number;
  words: number;
}

const config = loadConfig({ STT_THREADS: '1', STT_BUILTIN_TIMEOUT_BASE_MS: '120000' });
const streamsMax = Math.max(...STREAMS);
const engine = new BuiltinEngine(
  {
    ...config.speech.builtin,
    streamThreads: Math.min(2, os.availableParallelism()),
    streamDecoders: Math.max(2, streamsMax),
  },
  createLogger({ level: 'warn' }),
);
await engine.ready();
const ctx = await createRealtimeContext({
  engine,
  env: { REALTIME_TRANSCRIBE_TIMEOUT_MS: '120000' },
  logLevel: CUES ? 'debug' : 'info',
});

/**
 * Where the VAD puts a pause's start against where the corpus has it: its last speech window ends
 * before the phrase's last sample (the quiet end of the last syllable reads as silence), by 170-210 ms
 * on this corpus (median 206 ms, 2026-11-28). A pause is labelled by the corpus boundary it falls
 * before within these bounds; labelling by the sentence's span alone called most sentence ends `mid`.
 */
const LABEL_BEFORE_S = 0.4;
const LABEL_AFTER_S = 0.1;

/**
 * The judged pauses of one session, labelled against the clip's sentences: `end` (a sentence's end),
 * `mid` (a pause the corpus made inside a sentence), `inside` (another pause inside a sentence: the
 * synthesizer's own, or one the VAD found in speech) or `between` (between sentences).
 */
function collectCues(sessionId: string, clip: Clip, level: string): void {
  const marks = [
    ...clip.turns.map((x) => ({ at: x.end, label: 'end' })),
    ...clip.turns.flatMap((x) => x.pauses.map((at) => ({ at, label: 'mid' }))),
  ];
  for (const line of ctx.logs.lines) {
    if (!line.includes(sessionId) || !line.includes('turn end judged')) continue;
    const r = JSON.parse(line) as Record<string, unknown> & { atMs: number };
    const t = r.atMs / 1000;
    const mark = marks.find((m) => t > m.at - LABEL_BEFORE_S && t < m.at + LABEL_AFTER_S);
    const label = mark?.label ?? (clip.turns.some((x) => t > x.start && t < x.end) ? 'inside' : 'between');
    cueRows.push([clip.file, level, r.atMs, label, ...CUE_FIELDS.map((f) => r[f] ?? '')].join('\t'));
  }
}

async function run(clip: Clip, level: string, into: Outcome): Promise<void> {
  const { key } = await ctx.issueKey('pro');
  const cl = await connect(ctx.url, bearer(key));
  const created = await cl.next('session.created');
  if (DETAIL) console.error(`session ${created.session_id} ${clip.file}`);
  if (level !== 'default') {
    cl.send({ type: 'session.update', vad_eagerness: level });
    await cl.next('session.updated');
  }
  const stops = new Map<number, number>();
  const finals = new Map<number, { at: number; text: string }>();
  cl.ws.on('message', (data) => {
    const ev = JSON.parse(String(data)) as { type: string; utterance_index: number; audio_end_ms: number };
    if (ev.type === STOPPED) stops.set(ev.utterance_index, ev.audio_end_ms / 1000);
    if (ev.type === COMPLETED)
      finals.set(ev.utterance_index, {
        at: performance.now(),
        text: (ev as unknown as { text: string }).text,
      });
  });
  const pcm = corpusPcm({ path: path.join(DIR, clip.file) } as CorpusClip);
  const t0 = performance.now();
  await cl.stream(pcm, { pace: PACE, frameBytes: 640 });
  cl.send({ type: 'input_audio_buffer.flush' });
  // The flush ends the last turn at the latest: wait for its stop and every final.
  const last = clip.turns[clip.turns.length - 1].end - 0.4;
  let quietSince = performance.now();
  let seen = 0;
  for (const deadline = performance.now() + 240_000; performance.now() < deadline;) {
    if (cl.events.length !== seen) [seen, quietSince] = [cl.events.length, performance.now()];
    const started = cl.of('input_audio_buffer.speech_started').length;
    const settled = finals.size === stops.size && started === stops.size;
    if (settled && ([...stops.values()].some((e) => e >= last) || performance.now() - quietSince > 3000))
      break;
    await new Promise((r) => setTimeout(r, 100));
  }
  const throttled = cl.of('service.throttled');
  if (throttled.length) console.error(`${clip.file}: audio dropped ${JSON.stringify(throttled)}`);
  cl.ws.close(1000);
  await cl.closed;
  if (CUES) collectCues(String(created.session_id), clip, level);
  const ends = [...stops.entries()].sort((a, b) => a[0] - b[0]);
  const t = clip.turns;
  t.forEach((turn, i) => {
    into.turns++;
    const inside = ends.filter(([, e]) => e > turn.start && e < turn.end - 0.1);
    if (inside.length > 0) into.split++;
    const next = t[i + 1]?.start ?? Infinity;
    const after = ends.find(([, e]) => e >= turn.end - 0.1 && e < next + 0.05);
    if (i + 1 < t.length) {
      into.pairs++;
      if (!after) into.merged++;
    }
    if (after) {
      const ms = PACE > 0 ? finals.get(after[0])!.at - (t0 + (turn.end * 1000) / PACE) : NaN;
      if (PACE > 0) into.latency.push(ms);
      if (DETAIL)
        console.error(`${clip.file} turn ${i}: ${Math.round(ms)} ms${inside.length ? ' SPLIT' : ''}`);
    } else if (DETAIL) console.error(`${clip.file} turn ${i}: merged${inside.length ? ' SPLIT' : ''}`);
  });
  const text = ends.map(([i]) => finals.get(i)?.text ?? '').join(' ');
  const ref = t.map((x) => x.text).join(' ');
  const n = ref.split(' ').length;
  into.errors += wer(ref, text) * n;
  into.words += n;
}

const pct = (a: number, b: number) => (b ? `${((100 * a) / b).toFixed(1)} %` : '-');
const ms = (v: number) => (Number.isFinite(v) ? `${Math.round(v)}` : '-');
console.log(
  `turn corpus ${DIR} (${clips.length} clips, ${clips.reduce((n, c) => n + c.turns.length, 0)} turns), pace ${PACE}, load ${os
    .loadavg()
    .map((l) => l.toFixed(1))
    .join(' ')}`,
);
console.log('| eagerness | streams | split | merged | end -> final p50 | p95 | max | WER |');
console.log('|---|---|---|---|---|---|---|---|');
for (const level of LEVELS) {
  for (const streams of STREAMS) {
    const o: Outcome = { turns: 0, split: 0, pairs: 0, merged: 0, latency: [], errors: 0, words: 0 };
    for (let k = 0; k < clips.length; k += streams)
      await Promise.all(
        clips.slice(k, k + streams).map((c) =>
          run(c, level, o).catch((err: unknown) => {
            // What the server said last (warnings, errors, how sessions ended: uWS's reason for a 1006).
            const said = ctx.logs.lines
              .filter((l) => /"level":(40|50|60)/.test(l) || l.includes('realtime session ended'))
              .slice(-10);
            console.error(`${c.file} (${level}): ${String(err)}\n${said.join('\n')}`);
            throw err;
          }),
        ),
      );
    console.log(
      `| ${level} | ${streams} | ${pct(o.split, o.turns)} (${o.split}/${o.turns}) | ${pct(o.merged, o.pairs)} (${o.merged}/${o.pairs}) | ${ms(percentile(o.latency, 50))} ms | ${ms(percentile(o.latency, 95))} ms | ${ms(Math.max(...o.latency))} ms | ${pct(o.errors, o.words)} |`,
    );
  }
}
if (CUES) fs.writeFileSync(CUES, cueRows.join('\n') + '\n');
console.log(
  `load after: ${os
    .loadavg()
    .map((l) => l.toFixed(1))
    .join(' ')}`,
);
await ctx.close();
await engine.close();
process.exit(0);
