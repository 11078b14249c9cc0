/**
 * Command-line client for the realtime tier: streams an audio file (any
 * format ffmpeg reads) to WS /v1/audio/transcriptions/stream in 100 ms
 * binary frames, at real-time pace by default, and prints each utterance's
 * transcript as its `completed` event arrives. A way to try the stream from a
 * terminal, and a small reference client.
 *
 *   npm run stream -- talk.mp3 --key sk-...            # real-time pace
 *   npm run stream -- talk.mp3 --key sk-... --pace 4   # four times faster
 *
 * Options:
 *   --url URL        base URL (default $STT_BASE_URL or http://127.0.0.1:8080); ws:// is derived
 *   --key KEY        API key (default $STT_API_KEY), sent in the Authorization header
 *   --language L     session.update language (e.g. en)
 *   --pace N         speed relative to real time (default 1)
 *   --events         print every server event as JSON instead of the transcripts
 *
 * The progress line on stderr shows how much audio has been sent. Exit code
 * 1 when the session closes with anything but 1000 or an utterance fails.
 */
import fs from 'node:fs';
import { parseArgs } from 'node:util';
import WebSocket from 'ws';
import { decodeAudio } from '../shared/audio/index.js';
import { transcribeCliConfig } from '../shared/config/speech.js';

const FRAME_BYTES = 3200; // 100 ms of 16 kHz mono PCM16

function usage(message?: string): never {
  if (message) process.stderr.write(`stream: ${message}\n`);
  process.stderr.write(
    'usage: npm run stream -- <audio file> [--url URL] [--key KEY] [--language L] [--pace N] [--events]\n' +
      '  --key defaults to $STT_API_KEY, --url to $STT_BASE_URL or http://127.0.0.1:8080\n',
  );
  process.exit(2);
}

function streamUrl(base: string): string {
  const u = new URL(base);
  u.protocol = u.protocol === 'https:' ? 'wss:' : 'ws:';
  u.pathname = `${u.pathname.replace(/\/+$/, '')}/v1/audio/transcriptions/stream`;
  return u.toString();
}

async function main(): Promise<void> {
  const defaults = transcribeCliConfig();
  const { values, positionals } = parseArgs({
    allowPositionals: true,
    options: {
      url: { type: 'string', default: defaults.baseUrl },
      key: { type: 'string' },
      language: { type: 'string' },
      pace: { type: 'string', default: '1' },
      events: { type: 'boolean', default: false },
      help: { type: 'boolean', short: 'h' },
    },
  });
  if (values.help) usage();
  if (positionals.length !== 1) usage('give one audio file');
  const key = values.key ?? defaults.apiKey;
  if (!key) usage('an API key is required (--key or STT_API_KEY)');
  const pace = Number(values.pace);
  if (!(pace > 0)) usage('--pace must be a positive number');
  const file = positionals[0];
  if (!fs.existsSync(file)) usage(`no such file: ${file}`);
  const pcm = await decodeAudio(fs.readFileSync(file));
  const totalSeconds = pcm.length / 32000;

  const url = streamUrl(values.url!);
  const ws = new WebSocket(url, { headers: { authorization: `Bearer ${key}` }, perMessageDeflate: false });
  let failed = 0;
  let sentBytes = 0;
  let timer: NodeJS.Timeout | undefined;
  const progress = () => {
    if (!process.stderr.isTTY || values.events) return;
    process.stderr.write(`\rsent ${(sentBytes / 32000).toFixed(1)} / ${totalSeconds.toFixed(1)} s`);
  };
  const clearProgress = () => process.stderr.isTTY && !values.events && process.stderr.write('\r\x1b[K');

  ws.on('unexpected-response', (_req, res) => {
    let body = '';
    res.on('data', (d: Buffer) => (body += d));
    res.on('end', () => {
      process.stderr.write(`stream: ${url} refused the connection: HTTP ${res.statusCode} ${body}\n`);
      process.exit(1);
    });
  });
  ws.on('error', (err) => {
    process.stderr.write(`stream: ${url}: ${(err as Error & { code?: string }).code ?? err.message}\n`);
    process.exit(1);
  });

  ws.on('open', () => {
    if (values.language) ws.send(JSON.stringify({ type: 'session.update', language: values.language }));
    const started = Date.now();
    const tick = () => {
      const due = Math.min(pcm.length, Math.ceil((((Date.now() - started) * pace) / 100) * FRAME_BYTES));
      while (sentBytes < due) {
        const end = Math.min(pcm.length, sentBytes + FRAME_BYTES);
        ws.send(pcm.subarray(sentBytes, end));
        sentBytes = end;
      }
      progress();
      if (sentBytes >= pcm.length) {
        // End of the file: close the last utterance, then close once every transcript is in
        // (nothing open and the server quiet for a second).
        ws.send(JSON.stringify({ type: 'input_audio_buffer.flush' }));
        const flushedAt = Date.now();
        timer = setInterval(() => {
          const quiet = Date.now() - Math.max(lastEventAt, flushedAt) > 1000;
          if (open.size === 0 && quiet) ws.close(1000);
        }, 200);
        return;
      }
      timer = setTimeout(tick, 100 / pace);
    };
    tick();
  });

  const open = new Map<number, number>(); // utterance index -> audio_start_ms, until completed
  let lastEventAt = 0;
  ws.on('message', (data, isBinary) => {
    if (isBinary) return;
    lastEventAt = Date.now();
    const ev = JSON.parse(data.toString()) as Record<string, any>;
    if (values.events) process.stdout.write(`${JSON.stringify(ev)}\n`);
    switch (ev.type) {
      case 'input_audio_buffer.speech_started':
        open.set(ev.utterance_index, ev.audio_start_ms ?? 0);
        break;
      case 'conversation.item.input_audio_transcription.completed': {
        const startMs = open.get(ev.utterance_index) ?? 0;
        open.delete(ev.utterance_index);
        if (ev.error) failed++;
        if (!values.events) {
          clearProgress();
          const at = `${Math.floor(startMs / 60000)}:${((startMs % 60000) / 1000).toFixed(1).padStart(4, '0')}`;
          const text = ev.error ? `[failed: ${ev.error.code}]` : ev.text;
          process.stdout.write(`#${ev.utterance_index} ${at} ${text}\n`);
          progress();
        }
        break;
      }
      case 'error':
        if (!values.events && ev.utterance_index === undefined) {
          clearProgress();
          process.stderr.write(`server error: ${ev.code}: ${ev.message}\n`);
        }
        break;
    }
  });

  ws.on('close', (code, reason) => {
    clearTimeout(timer);
    clearInterval(timer);
    clearProgress();
    const normal = code === 1000;
    if (!normal) process.stderr.write(`stream: session closed ${code} ${reason.toString()}\n`);
    process.exitCode = normal && failed === 0 ? 0 : 1;
  });
}

main().catch((err) => {
  process.stderr.write(`stream: ${(err as Error).message}\n`);
  process.exit(1);
});
