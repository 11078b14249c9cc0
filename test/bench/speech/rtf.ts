/**
 * Real-time factor and throughput of the built-in engine with 1 and 2
 * decoder threads: every clip of test/audio, twice, submitted at once;
 * throughput = audio seconds / wall seconds. Trials alternate 1 and 2
 * threads and the best trial of each counts (other load on a shared
 * machine only ever slows a trial down).
 *
 *   npx tsx test/bench/speech/rtf.ts [trials=4]
 */
import os from 'node:os';
import { loadConfig } from '../../../shared/config/index.js';
import { createLogger } from '../../../shared/logger.js';
import { BuiltinEngine } from '../../../shared/stt/builtin.js';
import { loadClips } from '../../speech/helpers.js';
import { fmt, pcmOfWav } from './common.js';

const trials = Number(process.argv[2] ?? 4);
console.log(
  `machine: ${os.availableParallelism()} cores, load average ${os
    .loadavg()
    .map((x) => x.toFixed(2))
    .join(' ')}`,
);
// Every clip twice, longest first, so that two threads finish together
// (a trial's wall time is its slowest thread's).
const clips = [...loadClips(), ...loadClips()].sort((a, b) => b.seconds - a.seconds);
const pcms = clips.map((c) => pcmOfWav(c.path));
const audioSeconds = clips.reduce((s, c) => s + c.seconds, 0);
const logger = createLogger({ level: 'silent' });

interface Trial {
  wall: number;
  throughput: number;
  rtf: number;
  cpuPerAudio: number;
}
const engines = new Map<number, BuiltinEngine>();
for (const threads of [1, 2]) {
  const engine = new BuiltinEngine(
    { ...loadConfig({}).speech.builtin, threads, timeoutBaseMs: 600_000 },
    logger,
  );
  while (engine.stats().ready < threads) await new Promise((r) => setTimeout(r, 100));
  engines.set(threads, engine);
}

async function trial(threads: number): Promise<Trial> {
  const engine = engines.get(threads)!;
  const cpu0 = process.cpuUsage();
  const started = performance.now();
  const out = await Promise.all(pcms.map((pcm) => engine.transcribe({ pcm })));
  const wall = (performance.now() - started) / 1000;
  const cpu = process.cpuUsage(cpu0);
  const engineSeconds = out.reduce((s, r) => s + r.engineMs / 1000, 0);
  // CPU seconds of all threads of this process per audio second: the work itself, whatever the contention.
  return {
    wall,
    throughput: audioSeconds / wall,
    rtf: engineSeconds / audioSeconds,
    cpuPerAudio: (cpu.user + cpu.system) / 1e6 / audioSeconds,
  };
}

const all = new Map<number, Trial[]>([
  [1, []],
  [2, []],
]);
for (let i = 0; i < trials; i++) for (const threads of [1, 2]) all.get(threads)!.push(await trial(threads));
for (const e of engines.values()) await e.close();

const best = (threads: number) => all.get(threads)!.reduce((a, b) => (b.throughput > a.throughput ? b : a));
console.log(
  `audio: ${fmt(audioSeconds)} s per trial (${clips.length} clips at once, longest first), ${trials} trials per thread count`,
);
console.log(
  '| decoder threads | best wall s | best throughput (x real time) | RTF per decode | CPU s per audio s | all trials (x real time) |',
);
console.log('|---|---|---|---|---|---|');
for (const threads of [1, 2]) {
  const b = best(threads);
  const list = all
    .get(threads)!
    .map((t) => fmt(t.throughput, 2))
    .join(', ');
  console.log(
    `| ${threads} | ${fmt(b.wall)} | ${fmt(b.throughput, 2)} | ${fmt(b.rtf, 3)} | ${fmt(b.cpuPerAudio, 3)} | ${list} |`,
  );
}
console.log(`2 threads vs 1 (best trials): ${fmt(best(2).throughput / best(1).throughput, 2)}x throughput`);
console.log(
  `load average after: ${os
    .loadavg()
    .map((x) => x.toFixed(2))
    .join(' ')}`,
);
process.exit(0);
