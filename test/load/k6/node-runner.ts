/**
 * Runs a k6 script in Node, for machines where k6 itself cannot be installed
 * (it is on neither npm nor Debian, and building it needs the Go module proxy).
 * It implements the part of k6's API our scripts use, on real sockets:
 *
 *   k6/websockets  WebSocket (browser-style: onopen/onmessage/onclose/onerror,
 *                  binaryType 'arraybuffer', params.headers), over the `ws` package
 *   k6/metrics     Trend, Counter
 *   k6/timers      setTimeout, setInterval, clearTimeout, clearInterval
 *   globals        __ENV, __VU, __ITER, open(path, 'b')
 *   options        scenarios with the constant-vus executor (vus, duration,
 *                  gracefulStop), thresholds such as 'p(99)<500', 'count<1',
 *                  'avg<...', 'max<...', 'med<...'
 *
 * An iteration ends, as in k6, when the default function has returned and the
 * VU has no open socket and no pending timer left. The summary lists every
 * metric and threshold; the exit code is 99 when a threshold fails (as k6).
 *
 *   npx tsx test/load/k6/node-runner.ts test/load/k6/realtime.js -e KEY=sk-... -e VUS=5 -e DURATION_S=10
 *
 * This is a stand-in for a third-party tool that cannot run here, not a
 * replacement for k6: users with k6 run the same script with `k6 run`.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { Counter, hold, metrics, release, Trend, vuContext, type Vu } from './k6-api.js';

// ---------------------------------------------------------------- runner

interface ConstantVus {
  executor: 'constant-vus';
  vus: number;
  duration: string;
  gracefulStop?: string;
}

function seconds(d: string | undefined, fallback: number): number {
  if (!d) return fallback;
  const m = /^(\d+(?:\.\d+)?)(ms|s|m)$/.exec(d);
  if (!m) throw new Error(`unsupported duration "${d}"`);
  const n = Number(m[1]);
  return m[2] === 'ms' ? n / 1000 : m[2] === 'm' ? n * 60 : n;
}

const OPS: Record<string, (a: number, b: number) => boolean> = {
  '<': (a, b) => a < b,
  '<=': (a, b) => a <= b,
  '>': (a, b) => a > b,
  '>=': (a, b) => a >= b,
  '==': (a, b) => a === b,
  '===': (a, b) => a === b,
  '!=': (a, b) => a !== b,
};

export interface ThresholdResult {
  metric: string;
  expression: string;
  value: number;
  ok: boolean;
}

export function checkThresholds(thresholds: Record<string, string[]>): ThresholdResult[] {
  const out: ThresholdResult[] = [];
  for (const [name, exprs] of Object.entries(thresholds)) {
    const metric = metrics.get(name);
    for (const expression of exprs) {
      const m = /^\s*([a-z]+(?:\(\d+(?:\.\d+)?\))?)\s*(<=|>=|===|==|!=|<|>)\s*(-?\d+(?:\.\d+)?)\s*$/.exec(
        expression,
      );
      if (!m) throw new Error(`unsupported threshold "${expression}"`);
      const value = metric ? metric.stat(m[1]) : NaN;
      // An absent counter counts as zero; an empty trend fails its thresholds.
      const v = Number.isNaN(value) && metric instanceof Counter ? 0 : value;
      out.push({ metric: name, expression, value: v, ok: !Number.isNaN(v) && OPS[m[2]](v, Number(m[3])) });
    }
  }
  return out;
}

async function runVu(vu: Vu, fn: () => void, until: number, graceEnd: () => number): Promise<void> {
  while (Date.now() < until) {
    vu.iteration++;
    await new Promise<void>((resolve) => {
      let done = false;
      const finish = () => {
        if (done) return;
        done = true;
        global.clearTimeout(guard);
        resolve();
      };
      vu.idle = finish;
      // Past the scenario plus gracefulStop, k6 interrupts the iteration.
      const guard = global.setTimeout(
        () => {
          for (const t of vu.timers) global.clearTimeout(t);
          vu.timers.clear();
          for (const ws of vu.sockets) ws.terminate();
          vu.pending = 0;
          finish();
        },
        Math.max(0, graceEnd() - Date.now()),
      );
      vuContext.run(vu, () => {
        hold(vu);
        try {
          fn();
        } catch (err) {
          console.error(`VU ${vu.id} iteration ${vu.iteration}: ${(err as Error).stack ?? err}`);
        } finally {
          release(vu);
        }
      });
    });
  }
}

export interface RunResult {
  thresholds: ThresholdResult[];
  metrics: Record<string, Record<string, number>>;
  iterations: number;
}

/** Runs a k6 script; `env` becomes __ENV. */
export async function runK6Script(scriptPath: string, env: Record<string, string>): Promise<RunResult> {
  metrics.clear();
  const abs = path.resolve(scriptPath);
  const g = globalThis as Record<string, unknown>;
  g.__ENV = env;
  g.open = (file: string, mode?: string) => {
    const data = fs.readFileSync(path.resolve(path.dirname(abs), file));
    return mode === 'b'
      ? data.buffer.slice(data.byteOffset, data.byteOffset + data.byteLength)
      : data.toString();
  };
  Object.defineProperty(g, '__VU', { configurable: true, get: () => vuContext.getStore()?.id ?? 0 });
  Object.defineProperty(g, '__ITER', {
    configurable: true,
    get: () => (vuContext.getStore()?.iteration ?? 1) - 1,
  });

  // Point the script's k6 imports at this module, in a temporary copy.
  const self = new URL('./k6-api.ts', import.meta.url).href.replace(
    /\.ts$/,
    import.meta.url.endsWith('.ts') ? '.ts' : '.js',
  );
  const source = fs
    .readFileSync(abs, 'utf8')
    .replace(/from\s+['"]k6\/(websockets|metrics|timers)['"]/g, `from ${JSON.stringify(self)}`);
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'k6-node-'));
  const copy = path.join(tmp, path.basename(abs).replace(/\.js$/, '.mjs'));
  fs.writeFileSync(copy, source);
  let mod: {
    default: () => void;
    options?: { scenarios?: Record<string, ConstantVus>; thresholds?: Record<string, string[]> };
  };
  try {
    mod = await import(pathToFileURL(copy).href);
  } finally {
    fs.rmSync(tmp, { recursive: true, force: true });
  }
  const scenarios = Object.values(
    mod.options?.scenarios ?? {
      default: { executor: 'constant-vus', vus: 1, duration: '10s' } as ConstantVus,
    },
  );
  const vus: Vu[] = [];
  const runs: Promise<void>[] = [];
  for (const sc of scenarios) {
    if (sc.executor !== 'constant-vus') throw new Error(`unsupported executor ${sc.executor}`);
    const start = Date.now();
    const until = start + seconds(sc.duration, 10) * 1000;
    const graceEnd = () => until + seconds(sc.gracefulStop, 30) * 1000;
    for (let i = 0; i < sc.vus; i++) {
      const vu: Vu = { id: vus.length + 1, iteration: 0, pending: 0, sockets: new Set(), timers: new Set() };
      vus.push(vu);
      runs.push(runVu(vu, mod.default, until, graceEnd));
    }
  }
  await Promise.all(runs);
  const summary: RunResult['metrics'] = {};
  for (const [name, m] of metrics) {
    summary[name] =
      m instanceof Trend
        ? Object.fromEntries(
            ['count', 'avg', 'min', 'med', 'p(90)', 'p(95)', 'p(99)', 'max'].map((s) => [s, m.stat(s)]),
          )
        : { count: m.total };
  }
  return {
    thresholds: checkThresholds(mod.options?.thresholds ?? {}),
    metrics: summary,
    iterations: vus.reduce((a, v) => a + v.iteration, 0),
  };
}

function parseArgs(argv: string[]): { script: string; env: Record<string, string> } {
  const env: Record<string, string> = {};
  let script = '';
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === '-e' || argv[i] === '--env') {
      const [k, ...v] = argv[++i].split('=');
      env[k] = v.join('=');
    } else if (!argv[i].startsWith('-')) script = argv[i];
  }
  if (!script) throw new Error('usage: node-runner.ts SCRIPT.js [-e NAME=VALUE]...');
  return { script, env };
}

if (process.argv[1] && fileURLToPath(import.meta.url) === path.resolve(process.argv[1])) {
  const { script, env } = parseArgs(process.argv.slice(2));
  const result = await runK6Script(script, env);
  const fmt = (v: number) => (Number.isInteger(v) ? String(v) : v.toFixed(2));
  console.log(`iterations: ${result.iterations}`);
  for (const [name, stats] of Object.entries(result.metrics)) {
    console.log(
      `${name}: ${Object.entries(stats)
        .map(([k, v]) => `${k}=${fmt(v)}`)
        .join(' ')}`,
    );
  }
  for (const t of result.thresholds)
    console.log(`${t.ok ? '✓' : '✗'} ${t.metric} ${t.expression} (${fmt(t.value)})`);
  process.exit(result.thresholds.every((t) => t.ok) ? 0 : 99);
}
