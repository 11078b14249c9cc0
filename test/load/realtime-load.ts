/**
 * Realtime load generator: N clients each stream real speech (the clips of
 * test/audio, joined with pauses) in 100 ms binary frames at
 * real-time pace for a bounded time, then stop sending, wait for the
 * utterances already cut (at most FINALS_GRACE_MS) and close 1000. Prints connect time and
 * completion latency percentiles. Loopback targets only; stops by itself.
 *
 *   npx tsx test/load/realtime-load.ts --url ws://127.0.0.1:8081/v1/audio/transcriptions/stream \
 *     --key sk-... --clients 50 --seconds 30 [--ramp-ms 2000] [--pace 1]
 */
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import WebSocket from 'ws';

const here = path.dirname(fileURLToPath(import.meta.url));
// test/audio (the clips), from test/load or, compiled, from dist/test/load (dist/test/audio holds only compiled scripts).
const AUDIO_DIR =
  [path.resolve(here, '../audio'), path.resolve(here, '../../../test/audio')].find((d) =>
    fs.existsSync(path.join(d, 'jfk.wav')),
  ) ?? path.resolve(here, '../audio');

/** How long a client waits, once it stops sending, for the finals of utterances already cut. */
const FINALS_GRACE_MS = 10_000;

export function speechLoop(pauseMs = 600): Buffer {
  const parts: Buffer[] = [];
  for (const f of fs
    .readdirSync(AUDIO_DIR)
    .filter((n) => n.endsWith('.wav'))
    .sort()) {
    const buf = fs.readFileSync(path.join(AUDIO_DIR, f));
    const at = buf.indexOf('data');
    parts.push(buf.subarray(at + 8, at + 8 + buf.readUInt32LE(at + 4)));
    parts.push(Buffer.alloc(Math.round(pauseMs * 32)));
  }
  return Buffer.concat(parts);
}

export interface LoadOptions {
  url: string;
  headers: Record<string, string>;
  clients: number;
  seconds: number;
  rampMs?: number;
  pace?: number;
  frameMs?: number;
  /**
   * `native` (default): binary PCM16 at 16 kHz on the interface's stream. `openai`: the
   * OpenAI Realtime endpoint (`url` is then /v1/realtime?intent=transcription), PCM16 at
   * 24 kHz in base64 `input_audio_buffer.append` events, as OpenAI's clients send it.
   */
  protocol?: 'native' | 'openai';
}

export interface LoadResult {
  clients: number;
  connected: number;
  failedConnects: number;
  connectMs: { p50: number; p99: number };
  /** Client-observed: speech_stopped received -> completed received. */
  completionMs: { p50: number; p99: number; n: number };
  /** Server-reported latency_ms of completed events. */
  serverLatencyMs: { p50: number; p99: number };
  /** Completed events (with or without error). */
  utterances: number;
  /** speech_stopped events: utterances the server cut (those not completed were pending at the close). */
  stopped: number;
  failedUtterances: number;
  /** Failed utterances by error code. */
  errors: Record<string, number>;
  closes: Record<string, number>;
  framesSent: number;
  /** Connections closed before their session existed, opened again. */
  earlyCloses: number;
}

const pct = (xs: number[], p: number) => {
  if (xs.length === 0) return 0;
  const s = [...xs].sort((a, b) => a - b);
  return Math.round(s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] * 10) / 10;
};

/** 16 kHz PCM16 as 24 kHz (linear interpolation; the client's side of the OpenAI load). */
function to24k(pcm: Buffer): Buffer {
  const n = pcm.length / 2;
  const m = Math.floor((n * 3) / 2);
  const out = Buffer.alloc(m * 2);
  for (let j = 0; j < m; j++) {
    const x = (j * 2) / 3;
    const i = Math.floor(x);
    const a = pcm.readInt16LE(i * 2);
    const b = i + 1 < n ? pcm.readInt16LE((i + 1) * 2) : a;
    out.writeInt16LE(Math.round(a + (b - a) * (x - i)), j * 2);
  }
  return out;
}

/** An OpenAI transcription session with server VAD and 24 kHz PCM (what OpenAIRealtimeWS clients send first). */
const OPENAI_SESSION = JSON.stringify({
  type: 'session.update',
  session: {
    type: 'transcription',
    audio: { input: { format: { type: 'audio/pcm', rate: 24000 }, turn_detection: { type: 'server_vad' } } },
  },
});

export async function runLoad(o: LoadOptions): Promise<LoadResult> {
  const openai = o.protocol === 'openai';
  const audio = openai ? to24k(speechLoop()) : speechLoop();
  const frameBytes = Math.round((o.frameMs ?? 100) * (openai ? 48 : 32));
  const pace = o.pace ?? 1;
  const connectMs: number[] = [];
  const completionMs: number[] = [];
  const serverLatency: number[] = [];
  const closes: Record<string, number> = {};
  const errors: Record<string, number> = {};
  let failedConnects = 0;
  let utterances = 0;
  let stopped = 0;
  let failedUtterances = 0;
  let framesSent = 0;
  const deadline = Date.now() + (o.rampMs ?? 0) + o.seconds * 1000;

  /** Connections closed before their session existed, opened again (docs/realtime.md). */
  let earlyCloses = 0;
  const one = (i: number, attempt = 1): Promise<void> =>
    new Promise<void>((resolve) => {
      const t0 = performance.now();
      let created = false;
      const ws = new WebSocket(o.url, { headers: o.headers, perMessageDeflate: false });
      const stoppedAt = new Map<number | string, number>();
      /** Utterances cut (speech_stopped) and not answered yet. */
      const pending = new Set<number | string>();
      let timer: NodeJS.Timeout | undefined;
      ws.on('unexpected-response', (req, res) => {
        failedConnects++;
        closes[`http_${res.statusCode}`] = (closes[`http_${res.statusCode}`] ?? 0) + 1;
        req.destroy();
        resolve();
      });
      ws.on('error', () => {
        if (ws.readyState !== WebSocket.OPEN) {
          failedConnects++;
          resolve();
        }
      });
      ws.on('open', () => {
        if (openai) ws.send(OPENAI_SESSION);
      });
      // Audio goes once the session exists (docs/realtime.md); the connect time is until then.
      const start = () => {
        created = true;
        connectMs.push(performance.now() - t0);
        // Each client starts at a different place in the speech so utterances do not align.
        let off =
          ((i * 7919 * frameBytes) % audio.length) - (((i * 7919 * frameBytes) % audio.length) % frameBytes);
        const started = Date.now();
        let sent = 0;
        const tick = () => {
          if (ws.readyState !== WebSocket.OPEN) return;
          if (Date.now() >= deadline) {
            // A client that leaves waits for what it was promised: an utterance cut just before the
            // deadline would otherwise count as unanswered (the capacity step's check).
            const leave = () => {
              if (ws.readyState !== WebSocket.OPEN) return;
              if (pending.size === 0 || Date.now() >= deadline + FINALS_GRACE_MS) ws.close(1000);
              else timer = setTimeout(leave, 50);
            };
            return leave();
          }
          const due = Math.floor(((Date.now() - started) * pace) / (o.frameMs ?? 100)) + 1;
          while (sent < due) {
            if (off + frameBytes > audio.length) off = 0;
            const frame = audio.subarray(off, off + frameBytes);
            if (openai)
              ws.send(JSON.stringify({ type: 'input_audio_buffer.append', audio: frame.toString('base64') }));
            else ws.send(frame);
            off += frameBytes;
            sent++;
            framesSent++;
          }
          timer = setTimeout(tick, (o.frameMs ?? 100) / pace);
        };
        tick();
      };
      ws.on('message', (data, isBinary) => {
        if (isBinary) return;
        const ev = JSON.parse(data.toString());
        if (!created && /^(transcription_)?session\.created$/.test(ev.type)) start();
        // Native events carry utterance_index; OpenAI's carry item_id.
        const id = openai ? ev.item_id : ev.utterance_index;
        if (ev.type === 'input_audio_buffer.speech_stopped') {
          stopped++;
          stoppedAt.set(id, performance.now());
          pending.add(id);
        } else if (openai && ev.type === 'conversation.item.input_audio_transcription.failed') {
          pending.delete(id);
          utterances++;
          failedUtterances++;
          const code = String(ev.error?.code ?? 'unknown');
          errors[code] = (errors[code] ?? 0) + 1;
        } else if (ev.type === 'conversation.item.input_audio_transcription.completed') {
          pending.delete(id);
          utterances++;
          if (ev.error) {
            failedUtterances++;
            const code = String(ev.error.code ?? 'unknown');
            errors[code] = (errors[code] ?? 0) + 1;
          }
          const s = stoppedAt.get(id);
          if (s !== undefined) completionMs.push(performance.now() - s);
          if (!openai) serverLatency.push(ev.latency_ms);
        }
      });
      ws.on('close', (code, reason) => {
        clearTimeout(timer);
        // Closed right after its 101, before the session (uWebSockets.js 20.57, decisions/realtime.md):
        // opened again at once, at most twice in a row, as the project's clients do.
        if (!created && code === 1006 && attempt <= 2) {
          earlyCloses++;
          return void one(i, attempt + 1).then(resolve);
        }
        const k = `${code}${reason.length ? ' ' + reason.toString() : ''}`;
        closes[k] = (closes[k] ?? 0) + 1;
        resolve();
      });
    });

  const all: Promise<void>[] = [];
  for (let i = 0; i < o.clients; i++) {
    all.push(one(i));
    if (o.rampMs) await new Promise((r) => setTimeout(r, o.rampMs! / o.clients));
  }
  // Bounded: whatever happens, stop shortly after the deadline.
  await Promise.race([Promise.all(all), new Promise((r) => setTimeout(r, deadline - Date.now() + 15_000))]);
  return {
    clients: o.clients,
    connected: connectMs.length,
    failedConnects,
    connectMs: { p50: pct(connectMs, 50), p99: pct(connectMs, 99) },
    completionMs: { p50: pct(completionMs, 50), p99: pct(completionMs, 99), n: completionMs.length },
    serverLatencyMs: { p50: pct(serverLatency, 50), p99: pct(serverLatency, 99) },
    utterances,
    stopped,
    failedUtterances,
    errors,
    closes,
    framesSent,
    earlyCloses,
  };
}

function arg(name: string, fallback?: string): string {
  const i = process.argv.indexOf(`--${name}`);
  if (i >= 0 && process.argv[i + 1]) return process.argv[i + 1];
  if (fallback === undefined) throw new Error(`--${name} is required`);
  return fallback;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const url = arg('url', 'ws://127.0.0.1:8081/v1/audio/transcriptions/stream');
  const host = new URL(url).hostname;
  if (!['127.0.0.1', 'localhost', '::1', '[::1]'].includes(host))
    throw new Error('load tests target loopback only');
  const r = await runLoad({
    url,
    headers: { authorization: `Bearer ${arg('key')}` },
    clients: Number(arg('clients', '20')),
    seconds: Math.min(600, Number(arg('seconds', '30'))),
    rampMs: Number(arg('ramp-ms', '2000')),
    pace: Number(arg('pace', '1')),
  });
  process.stdout.write(JSON.stringify(r, null, 2) + '\n');
  process.exit(0);
}
