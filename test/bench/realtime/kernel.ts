/**
 * The OpenAI endpoint's per-frame work on one 100 ms frame of 24 kHz audio
 * (2,400 samples, 6,400 base64 characters), microseconds per frame, the ways
 * side by side in one process, alternating:
 *   npx tsx test/bench/realtime/kernel.ts [--frames 20000] [--rounds 5]
 * - bytes: the append's base64 decoded by the kernel from the frame's bytes
 *   straight into the filter (what /v1/realtime does);
 * - string: the frame made a string, its base64 decoded by Node, then the
 *   filter (what it did before);
 * - filter: the filter alone on decoded samples.
 */
import { Resampler24To16 } from '../../../realtime/resample.js';
import { appendAudioBytes } from '../../../realtime/protocol.js';

const arg = (name: string, def: number): number => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : def;
};
const frames = arg('frames', 20000);
const rounds = arg('rounds', 5);

const pcm = Buffer.alloc(4800);
for (let i = 0; i < 2400; i++)
  pcm.writeInt16LE(Math.round(8000 * Math.sin(i / 7) + 800 * Math.sin(i * 1.3)), i * 2);
const frame = Buffer.from(
  JSON.stringify({ type: 'input_audio_buffer.append', audio: pcm.toString('base64') }),
);
const utf8 = new TextDecoder();
const r = new Resampler24To16();
let sink = 0;

const ways: Record<string, () => void> = {
  bytes: () => {
    sink += r.pushBase64(appendAudioBytes(frame)!, 1 << 20)!.length;
  },
  string: () => {
    const m = JSON.parse(utf8.decode(frame)) as { audio: string };
    sink += r.push(Buffer.from(m.audio, 'base64'), true).length;
  },
  filter: () => {
    sink += r.push(pcm, true).length;
  },
};

const times: Record<string, number[]> = Object.fromEntries(Object.keys(ways).map((k) => [k, []]));
for (let round = 0; round <= rounds; round++) {
  for (const [name, f] of Object.entries(ways)) {
    const t0 = process.hrtime.bigint();
    for (let i = 0; i < frames; i++) f();
    const us = Number(process.hrtime.bigint() - t0) / 1000 / frames;
    if (round > 0) times[name].push(us); // round 0 warms up
  }
}
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
console.log(
  JSON.stringify(
    {
      frame: '100 ms at 24 kHz, base64 append',
      frames,
      rounds,
      medianMicrosecondsPerFrame: Object.fromEntries(
        Object.entries(times).map(([k, v]) => [k, Math.round(median(v) * 100) / 100]),
      ),
      sink,
    },
    null,
    2,
  ),
);
