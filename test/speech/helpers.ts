/**
 * Shared pieces of the speech tests and benchmarks: the test clips and their
 * references (test/audio), word error rate,
 * ffmpeg-made variants of a clip, and real engine/ worker processes.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import readline from 'node:readline';
import { fileURLToPath } from 'node:url';
import { canonicalWavSamples } from '../../shared/audio/index.js';

export const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
export const AUDIO_DIR = path.resolve(REPO_ROOT, 'test/audio');

export interface Clip {
  file: string;
  path: string;
  seconds: number;
  reference: string;
}

export function loadClips(): Clip[] {
  const rows = fs.readFileSync(path.join(AUDIO_DIR, 'refs.tsv'), 'utf8').trim().split('\n').slice(1);
  return rows.map((row) => {
    const [file, seconds, reference] = row.split('\t');
    return { file, path: path.join(AUDIO_DIR, file), seconds: Number(seconds), reference };
  });
}

/** The samples of a test clip (16 kHz mono PCM16; headers vary in length). */
export function pcmOf(file: string): Buffer {
  const pcm = canonicalWavSamples(fs.readFileSync(file));
  if (!pcm) throw new Error(`${file} is not 16 kHz mono PCM16`);
  return pcm;
}

export function clip(name: string): Clip {
  const c = loadClips().find((x) => x.file === name);
  if (!c) throw new Error(`no clip ${name}`);
  return c;
}

function words(text: string): string[] {
  return text
    .toLowerCase()
    .replace(/[^a-z' ]+/g, ' ')
    .split(/\s+/)
    .filter(Boolean);
}

/** Word error rate: word-level Levenshtein distance / reference length. */
export function wer(reference: string, hypothesis: string): number {
  const r = words(reference);
  const h = words(hypothesis);
  let prev = Array.from({ length: h.length + 1 }, (_, j) => j);
  for (let i = 1; i <= r.length; i++) {
    const cur = [i];
    for (let j = 1; j <= h.length; j++) {
      cur[j] = Math.min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (r[i - 1] === h[j - 1] ? 0 : 1));
    }
    prev = cur;
  }
  return r.length ? prev[h.length] / r.length : h.length ? 1 : 0;
}

/** Runs ffmpeg with the input on stdin and returns stdout (test fixtures in other formats). */
export function ffmpegConvert(input: Buffer, args: string[]): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const ff = spawn('ffmpeg', ['-hide_banner', '-loglevel', 'error', '-i', 'pipe:0', ...args, 'pipe:1']);
    const out: Buffer[] = [];
    let err = '';
    ff.stdout.on('data', (d: Buffer) => out.push(d));
    ff.stderr.on('data', (d: Buffer) => (err += d));
    ff.stdin.on('error', () => {});
    ff.on('close', (code) =>
      code === 0 ? resolve(Buffer.concat(out)) : reject(new Error(`ffmpeg: ${err}`)),
    );
    ff.stdin.end(input);
  });
}

export interface EngineProcess {
  url: string;
  port: number;
  child: ChildProcess;
  kill(): Promise<void>;
}

/** Starts a real engine/server.ts process on a free loopback port. */
export async function startEngine(env: Record<string, string> = {}): Promise<EngineProcess> {
  const child = spawn(process.execPath, ['--import', 'tsx', path.join(REPO_ROOT, 'engine/server.ts')], {
    cwd: REPO_ROOT,
    env: {
      ...process.env,
      ENGINE_HOST: '127.0.0.1',
      ENGINE_PORT: '0',
      STT_THREADS: '1',
      LOG_LEVEL: 'info',
      // The test machine is shared with the other test files: a clip may wait its turn on the cores far
      // past the default decode limit (base 10 s), which these tests do not measure.
      STT_BUILTIN_TIMEOUT_BASE_MS: '120000',
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stderr = '';
  child.stderr!.on('data', (d: Buffer) => (stderr += d));
  const port = await new Promise<number>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`engine did not start: ${stderr}`)), 20_000);
    const lines = readline.createInterface({ input: child.stdout! });
    lines.on('line', (line) => {
      try {
        const msg = JSON.parse(line) as { msg?: string; port?: number };
        if (msg.msg === 'engine listening' && msg.port) {
          clearTimeout(timer);
          resolve(msg.port);
        }
      } catch {
        /* not a log line */
      }
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`engine exited with ${code}: ${stderr}`));
    });
  });
  const url = `http://127.0.0.1:${port}`;
  return {
    url,
    port,
    child,
    kill: () =>
      new Promise<void>((resolve) => {
        if (child.exitCode !== null || child.signalCode !== null) return resolve();
        child.once('exit', () => resolve());
        child.kill('SIGKILL');
      }),
  };
}
