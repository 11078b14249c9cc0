/**
 * Command-line client for the realtime tier: streams an audio file (any
 * format ffmpeg reads) to WS /v1/audio/transcriptions/stream in 100 ms
 * binary frames, at real-time pace by default, and prints each utterance's
 * transcript as its `completed` event arrives. A way to try the stream from a
 * terminal, and a small reference client.
 *
 *   npm run stream -- talk.mp3 --key sk-...            # real-time pace
 *   npm run stream -- talk.mp3 --key sk-... --pace 4   # four times faster
 *   arecord -q -f S16_LE -r 16000 -c 1 -t wav | npm run stream -- -   # a microphone
 *
 * `-` reads the audio from stdin, in any format ffmpeg reads, and streams it
 * as it arrives (at most at --pace), so a microphone pipe is live.
 *
 * Options:
 *   --url URL        base URL (default $STT_BASE_URL or http://127.0.0.1:8080); ws:// is derived
 *   --key KEY        API key (default $STT_API_KEY), sent in the Authorization header
 *   --language L     session.update language (e.g. en)
 *   --pace N         speed relative to real time (default 1)
 *   --events         print every server event as JSON instead of the transcripts
 *
 * The progress line on stderr shows how much audio has been sent. Exit code
 * 1 when the session closes with anything but 1000, an utterance fails, or the server
 * dropped audio (`service.throttled`, printed as it happens).
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import WebSocket from 'ws';
import { decodeAudio } from '../shared/audio/index.js';
import { speechConfig } from '../shared/config/speech.js';
import { parseCliArgs } from './args.js';
import { STREAM_PATH } from '../shared/paths.js';

const FRAME_BYTES = 3200; // 100 ms of 16 kHz mono PCM16

function usage(message?: string): never {
  if (message) process.stderr.write(`stream: ${message}\n`);
  process.stderr.write(
    'usage: npm run stream -- <audio file | -> [--url URL] [--key KEY] [--language L] [--pace N] [--events]\n' +
      '  -  reads audio from stdin (any format ffmpeg reads), e.g. a microphone:\n' +
      '     arecord -q -f S16_LE -r 16000 -c 1 -t wav | npm run stream -- -\n' +
      '  --key defaults to $STT_API_KEY, --url to $STT_BASE_URL or http://127.0.0.1:8080\n',
  );
  process.exit(2);
}

/** 16 kHz mono PCM16 as it becomes available: a whole decoded file, or ffmpeg decoding stdin. */
class PcmSource {
  private chunks: Buffer[] = [];
  available = 0;
  ended = false;

  static whole(pcm: Buffer): PcmSource {
    const s = new PcmSource();
    s.push(pcm);
    s.ended = true;
    return s;
  }

  /** ffmpeg reads stdin in whatever format it is and writes PCM as it decodes. */
  static stdin(ffmpegPath: string): PcmSource {
    const s = new PcmSource();
    const ff = spawn(
      ffmpegPath,
      [
        '-hide_banner',
        '-loglevel',
        'error',
        '-i',
        'pipe:0',
        '-f',
        's16le',
        '-ac',
        '1',
        '-ar',
        '16000',
        'pipe:1',
      ],
      { stdio: ['inherit', 'pipe', 'inherit'] },
    );
    ff.stdout.on('data', (d: Buffer) => s.push(d));
    ff.on('error', (err) => {
      process.stderr.write(`stream: cannot run ffmpeg: ${err.message}\n`);
      process.exit(1);
    });
    ff.on('close', () => (s.ended = true));
    return s;
  }

  private push(b: Buffer): void {
    this.chunks.push(b);
    this.available += b.length;
  }

  /** Up to `n` bytes from the front. */
  take(n: number): Buffer {
    const out: Buffer[] = [];
    let want = Math.min(n, this.available);
    this.available -= want;
    while (want > 0) {
      const head = this.chunks[0];
      if (head.length <= want) {
        out.push(head);
        this.chunks.shift();
        want -= head.length;
      } else {
        out.push(head.subarray(0, want));
        this.chunks[0] = head.subarray(want);
        want = 0;
      }
    }
    return out.length === 1 ? out[0] : Buffer.concat(out);
  }
}

function streamUrl(base: string): string {
  const u = new URL(base);
  u.protocol = u.protocol === 'https:' ? 'wss:' : 'ws:';
  u.pathname = `${u.pathname.replace(/\/+$/, '')}${STREAM_PATH}`;
  return u.toString();
}

/** The fields of the server's events (interface section 4) this client reads. */
interface StreamEvent {
  type: string;
  utterance_index: number;
  audio_start_ms?: number;
  text?: string;
  error?: { code: string };
  code?: string;
  message?: string;
  reason?: string;
  dropped_ms?: number;
}

async function main(): Promise<void> {
  const { values, positionals, key } = parseCliArgs(
    {
      language: { type: 'string' },
      pace: { type: 'string', default: '1' },
      events: { type: 'boolean', default: false },
    },
    usage,
  );
  if (positionals.length !== 1) usage('give one audio file, or - for stdin');
  const pace = Number(values.pace);
  if (!(pace > 0)) usage('--pace must be a positive number');
  const file = positionals[0];
  let source: PcmSource;
  if (file === '-') source = PcmSource.stdin(speechConfig(process.env).audio.ffmpegPath);
  else {
    if (!fs.existsSync(file)) usage(`no such file: ${file}`);
    source = PcmSource.whole(await decodeAudio(fs.readFileSync(file)));
  }
  const totalSeconds = source.ended ? source.available / 32000 : undefined;

  const url = streamUrl(values.url);
  let failed = 0;
  let dropped = 0;
  let sentBytes = 0;
  let timer: NodeJS.Timeout | undefined;
  const progress = () => {
    if (!process.stderr.isTTY || values.events) return;
    const total = totalSeconds === undefined ? '' : ` / ${totalSeconds.toFixed(1)}`;
    process.stderr.write(`\rsent ${(sentBytes / 32000).toFixed(1)}${total} s`);
  };
  const clearProgress = () => process.stderr.isTTY && !values.events && process.stderr.write('\r\x1b[K');
  const open = new Map<number, number>(); // utterance index -> audio_start_ms, until completed
  let lastEventAt = 0;

  // The audio starts with the session (`session.created`): a connection that closes before it carried
  // none, and is opened again, at most twice (uWebSockets.js 20.57 can drop a connection inside its
  // upgrade; docs/decisions/realtime.md, "session.created after the upgrade call").
  const connect = (attempt: number) => {
    const ws = new WebSocket(url, { headers: { authorization: `Bearer ${key}` }, perMessageDeflate: false });
    let started = false;
    /** No server there (refused, unknown host): nothing to open again. */
    let unreachable = false;
    const retry = () => !started && !unreachable && attempt < 2;

    ws.on('unexpected-response', (_req, res) => {
      let body = '';
      res.on('data', (d: Buffer) => (body += d.toString()));
      res.on('end', () => {
        process.stderr.write(`stream: ${url} refused the connection: HTTP ${res.statusCode} ${body}\n`);
        process.exit(1);
      });
    });
    ws.on('error', (err) => {
      const code = (err as Error & { code?: string }).code;
      unreachable = ['ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH'].includes(code ?? '');
      if (retry()) return; // 'close' follows and connects again
      process.stderr.write(`stream: ${url}: ${(err as Error & { code?: string }).code ?? err.message}\n`);
      process.exit(1);
    });

    const begin = () => {
      if (values.language) ws.send(JSON.stringify({ type: 'session.update', language: values.language }));
      const startedAt = Date.now();
      const tick = () => {
        // Whole frames only, except the last one; never ahead of the pace.
        const due = Math.ceil((((Date.now() - startedAt) * pace) / 100) * FRAME_BYTES);
        while (
          sentBytes < due &&
          (source.available >= FRAME_BYTES || (source.ended && source.available > 0))
        ) {
          const frame = source.take(FRAME_BYTES);
          ws.send(frame);
          sentBytes += frame.length;
        }
        progress();
        if (source.ended && source.available === 0) {
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
    };

    ws.on('message', (data, isBinary) => {
      if (isBinary) return;
      lastEventAt = Date.now();
      const ev = JSON.parse((data as Buffer).toString()) as StreamEvent;
      if (values.events) process.stdout.write(`${JSON.stringify(ev)}\n`);
      switch (ev.type) {
        case 'session.created':
          if (!started) {
            started = true;
            begin();
          }
          break;
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
            const text = ev.error ? `[failed: ${ev.error.code}]` : ev.text || '(no words)';
            process.stdout.write(`#${ev.utterance_index} ${at} ${text}\n`);
            progress();
          }
          break;
        }
        case 'service.throttled':
          // Audio the server dropped: never lost silently (issue 39).
          dropped += ev.dropped_ms ?? 0;
          if (!values.events) {
            clearProgress();
            process.stderr.write(
              `server dropped ${((ev.dropped_ms ?? 0) / 1000).toFixed(1)} s of audio (${ev.reason ?? 'throttled'})${pace > 1 ? '; try a lower --pace' : ''}\n`,
            );
          }
          break;
        case 'error':
          if (!values.events && ev.utterance_index === undefined) {
            clearProgress();
            process.stderr.write(`server error: ${ev.code}: ${ev.message}\n`);
          }
          break;
      }
    });

    ws.on('close', (code, reason) => {
      if (retry()) {
        process.stderr.write(
          `stream: the connection closed (${code}) before the session started; connecting again\n`,
        );
        connect(attempt + 1);
        return;
      }
      clearTimeout(timer);
      clearInterval(timer);
      clearProgress();
      const normal = code === 1000;
      if (!normal) process.stderr.write(`stream: session closed ${code} ${reason.toString()}\n`);
      if (dropped > 0)
        process.stderr.write(`stream: the server dropped ${(dropped / 1000).toFixed(1)} s of audio in all\n`);
      process.exitCode = normal && failed === 0 && dropped === 0 ? 0 : 1;
    });
  };
  connect(0);
}

main().catch((err) => {
  process.stderr.write(`stream: ${(err as Error).message}\n`);
  process.exit(1);
});
