/** Measurement helpers of the API benchmarks: CPU pinning and instruction counts. */
import { execFileSync, spawn } from 'node:child_process';

/** Pins a process and all its threads to one CPU (taskset); false when it could not (cpu < 0, no taskset). */
export function pinToCpu(pid: number, cpu: number): boolean {
  if (cpu < 0) return false;
  try {
    execFileSync('taskset', ['-a', '-p', '-c', String(cpu), String(pid)], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

/**
 * Instructions (user + kernel) the process `pid` executes while `work` runs,
 * counted by `perf stat`; NaN when perf is unavailable or not asked for.
 */
export async function instructionsDuring<T>(
  pid: number,
  work: () => Promise<T>,
  enabled = true,
): Promise<{ result: T; instructions: number }> {
  if (!enabled) return { result: await work(), instructions: NaN };
  const perf = spawn('perf', ['stat', '-x,', '-e', 'instructions:u,instructions:k', '-p', String(pid)], {
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let report = '';
  perf.stderr.on('data', (d: Buffer) => (report += d.toString()));
  perf.on('error', () => {});
  const exited = new Promise((r) => perf.once('close', r));
  await new Promise((r) => setTimeout(r, 300)); // attached
  const result = await work();
  perf.kill('SIGINT');
  await exited;
  const counts = report
    .split('\n')
    .filter((l) => /,instructions:[uk],/.test(l))
    .map((l) => Number(l.split(',')[0]));
  return { result, instructions: counts.length === 2 ? counts[0] + counts[1] : NaN };
}
