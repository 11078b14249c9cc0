/** CPU pinning for the API benchmarks: servers on one core, the load generator on another. */
import { execFileSync } from 'node:child_process';

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
