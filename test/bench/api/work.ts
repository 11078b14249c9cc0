/**
 * What a fixed amount of request work costs in the API benchmark's measure
 * (throughput against bare Koa at 50 connections, server and load generator
 * pinned to their own cores): bare Koa with 0, 10, 20 and 30 µs of busy work
 * added to every request, each run in turn, medians of the rounds.
 *
 *   npm run build && node dist/test/bench/api/work.js [--duration 4] [--rounds 2] [--work 0,10,20,30]
 *
 * The guardrail of the job poll (≥ 50 % of bare Koa's throughput) is a
 * budget of request work; this shows how large that budget is on the
 * machine at hand (docs/benchmarks.md).
 */
import { fork, type ChildProcess } from 'node:child_process';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import autocannon from 'autocannon';
import { pinToCpu } from './measure.js';

const here = path.dirname(fileURLToPath(import.meta.url));
const compiled = import.meta.url.endsWith('.js');
const arg = (name: string, def: string) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1] : def;
};
const duration = Number(arg('duration', '4'));
const rounds = Number(arg('rounds', '2'));
const works = arg('work', '0,10,20,30').split(',').map(Number);
const pinned = os.availableParallelism() >= 2 && pinToCpu(process.pid, 1);

function start(workUs: number): Promise<{ child: ChildProcess; port: number }> {
  const child = fork(path.join(here, compiled ? 'bareKoa.js' : 'bareKoa.ts'), [], {
    execArgv: compiled ? [] : ['--import', 'tsx'],
    env: { ...process.env, BARE_WORK_US: String(workUs) },
    stdio: ['ignore', 'ignore', 'inherit', 'ipc'],
  });
  return new Promise((resolve, reject) => {
    child.once('message', (m: { port: number }) => {
      if (pinned) pinToCpu(child.pid!, 0);
      resolve({ child, port: m.port });
    });
    child.once('exit', (c) => reject(new Error(`bareKoa exited ${c}`)));
  });
}

const cpuOf = (child: ChildProcess) =>
  new Promise<number>((resolve) => {
    child.once('message', (m: { cpu: NodeJS.CpuUsage }) => resolve(m.cpu.user + m.cpu.system));
    child.send('cpu');
  });
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

const rps = new Map<number, number[]>(works.map((w) => [w, []]));
const cpu = new Map<number, number[]>(works.map((w) => [w, []]));
for (let r = 0; r < rounds; r++) {
  for (const w of works) {
    const { child, port } = await start(w);
    const url = `http://127.0.0.1:${port}/`;
    await autocannon({ url, connections: 50, duration: 1 });
    const c0 = await cpuOf(child);
    const res = await autocannon({ url, connections: 50, duration });
    const used = (await cpuOf(child)) - c0;
    rps.get(w)!.push(res.requests.average);
    cpu.get(w)!.push(used / Math.max(1, res.requests.total));
    child.kill();
    process.stderr.write(`round ${r + 1} work ${w} µs: ${Math.round(res.requests.average)} req/s\n`);
  }
}
const base = median(rps.get(works[0])!);
console.log(
  `\nBare Koa with busy work per request: 50 connections, ${duration} s x ${rounds} rounds (${pinned ? 'server on CPU 0, load generator on CPU 1' : 'not pinned'}; load average ${os.loadavg()[0].toFixed(1)})\n`,
);
console.log('| work added per request | req/s | vs no work | server CPU µs/req |');
console.log('|---|---|---|---|');
for (const w of works) {
  const r = median(rps.get(w)!);
  console.log(
    `| ${w} µs | ${Math.round(r)} | ${((r / base) * 100).toFixed(0)}% | ${median(cpu.get(w)!).toFixed(1)} |`,
  );
}
process.exit(0);
