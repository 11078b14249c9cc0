/**
 * Command-line client for the segment endpoint (or any OpenAI-compatible
 * transcription server, engine/ workers included).
 *
 *   npm run transcribe -- clip.mp3 --key sk-...            # prints the text
 *   npm run transcribe -- talks/ --format srt --out subs/  # one .srt per file
 *
 * Options:
 *   --url URL          base URL (default $STT_BASE_URL or http://127.0.0.1:8080)
 *   --key KEY          API key (default $STT_API_KEY; keep keys out of shell history)
 *   --format F         text (default, printed) | json | verbose_json | srt | vtt (written to files)
 *   --out DIR          where files go (default: beside each input)
 *   --language L, --prompt P, --model M, --worker-id W
 *   --concurrency N    files in flight at once (default 2)
 *
 * 429 answers are retried after their Retry-After; 502/503 once (the
 * interface lets the client resend). Exit code 1 when any file failed.
 */
import fs from 'node:fs';
import path from 'node:path';
import { parseArgs } from 'node:util';
import cliProgress from 'cli-progress';
import { transcribeCliConfig } from '../shared/config/speech.js';
import { RESPONSE_FORMATS, isResponseFormat, type ResponseFormat } from '../shared/stt/formats.js';

const AUDIO_EXTENSIONS = new Set([
  '.wav',
  '.mp3',
  '.ogg',
  '.oga',
  '.opus',
  '.flac',
  '.m4a',
  '.mp4',
  '.aac',
  '.webm',
  '.mka',
  '.wma',
]);
const FILE_EXTENSION: Record<ResponseFormat, string> = {
  text: 'txt',
  json: 'json',
  verbose_json: 'json',
  srt: 'srt',
  vtt: 'vtt',
};

const HELP = `usage: npm run transcribe -- <file|folder>... [options]

Transcribes audio files (a folder: every audio file in it) through
POST /v1/audio/transcriptions, with a progress bar on stderr.

  --url URL          base URL (default $STT_BASE_URL or http://127.0.0.1:8080)
  --key KEY          API key (default $STT_API_KEY; keep keys out of shell history)
  --format F         text (default: printed) | json | verbose_json | srt | vtt (written to files)
  --out DIR          where files go (default: beside each input)
  --language L       language hint, e.g. en
  --prompt P         context prompt
  --model M          model name passed to the service (default whisper-1)
  --worker-id W      pin a speech worker
  --concurrency N    files in flight at once (default 2)

429 answers are retried after their Retry-After, 502/503 once. Exit code 1
when any file failed, 2 for a usage error.
`;

function usage(message?: string): never {
  if (message) process.stderr.write(`transcribe: ${message}\n\n`);
  process.stderr.write(HELP);
  process.exit(message ? 2 : 0);
}
function listInputs(paths: string[]): string[] {
  const files: string[] = [];
  for (const p of paths) {
    const stat = fs.statSync(p, { throwIfNoEntry: false });
    if (!stat) usage(`no such file or folder: ${p}`);
    if (stat.isDirectory()) {
      for (const name of fs.readdirSync(p).sort()) {
        const full = path.join(p, name);
        if (AUDIO_EXTENSIONS.has(path.extname(name).toLowerCase()) && fs.statSync(full).isFile())
          files.push(full);
      }
    } else files.push(p);
  }
  return files;
}

interface Options {
  url: string;
  key: string;
  format: ResponseFormat;
  language?: string;
  prompt?: string;
  model: string;
  workerId?: string;
}

async function transcribeFile(file: string, o: Options): Promise<string> {
  const data = fs.readFileSync(file);
  for (let attempt = 1; ; attempt++) {
    const form = new FormData();
    form.append('file', new Blob([data as Uint8Array<ArrayBuffer>]), path.basename(file));
    form.append('model', o.model);
    form.append('response_format', o.format);
    if (o.language) form.append('language', o.language);
    if (o.prompt) form.append('prompt', o.prompt);
    if (o.workerId) form.append('worker_id', o.workerId);
    const endpoint = `${o.url.replace(/\/+$/, '')}/v1/audio/transcriptions`;
    const res = await fetch(endpoint, {
      method: 'POST',
      headers: { authorization: `Bearer ${o.key}` },
      body: form,
    }).catch((err: Error & { cause?: { code?: string; message?: string } }) => {
      // fetch says only "fetch failed": name the address and the reason (ECONNREFUSED, ENOTFOUND, ...).
      throw new Error(`cannot reach ${endpoint}: ${err.cause?.code ?? err.cause?.message ?? err.message}`);
    });
    const body = await res.text();
    if (res.ok)
      return o.format === 'json' || o.format === 'verbose_json'
        ? `${JSON.stringify(JSON.parse(body), null, 2)}\n`
        : body;
    const retryAfter = Number(res.headers.get('retry-after') ?? 1);
    const retryable =
      (res.status === 429 && attempt <= 5) || ((res.status === 502 || res.status === 503) && attempt <= 1);
    if (!retryable) {
      let message = body;
      try {
        const e = JSON.parse(body) as { error?: { message?: string; code?: string } | string };
        message = typeof e.error === 'string' ? e.error : `${e.error?.code}: ${e.error?.message}`;
      } catch {
        /* plain text */
      }
      throw new Error(`HTTP ${res.status} ${message}`);
    }
    await new Promise((r) => setTimeout(r, Math.min(60, Math.max(1, retryAfter)) * 1000));
  }
}

async function main(): Promise<void> {
  const defaults = transcribeCliConfig();
  const { values, positionals } = parseArgs({
    allowPositionals: true,
    options: {
      url: { type: 'string', default: defaults.baseUrl },
      key: { type: 'string' },
      format: { type: 'string', default: 'text' },
      out: { type: 'string' },
      language: { type: 'string' },
      prompt: { type: 'string' },
      model: { type: 'string', default: 'whisper-1' },
      'worker-id': { type: 'string' },
      concurrency: { type: 'string', default: '2' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  if (values.help) usage();
  if (positionals.length === 0) usage('give at least one file or folder');
  const key = values.key ?? defaults.apiKey;
  if (!key) usage('an API key is required (--key or STT_API_KEY)');
  if (!isResponseFormat(values.format)) usage(`--format must be one of ${RESPONSE_FORMATS.join(', ')}`);
  const concurrency = Number(values.concurrency);
  if (!Number.isInteger(concurrency) || concurrency < 1) usage('--concurrency must be a positive integer');
  const format = values.format;
  const files = listInputs(positionals);
  if (files.length === 0) usage('no audio files found');
  if (values.out) fs.mkdirSync(values.out, { recursive: true });
  const options: Options = {
    url: values.url!,
    key,
    format,
    language: values.language,
    prompt: values.prompt,
    model: values.model!,
    workerId: values['worker-id'],
  };

  const bar = new cliProgress.SingleBar(
    {
      format: 'transcribing [{bar}] {value}/{total} files | {file}',
      hideCursor: true,
      stream: process.stderr,
    },
    cliProgress.Presets.shades_classic,
  );
  bar.start(files.length, 0, { file: '' });
  const texts = new Map<string, string>();
  const failures: string[] = [];
  let next = 0;
  const worker = async () => {
    while (next < files.length) {
      const file = files[next++];
      bar.update({ file: path.basename(file) });
      try {
        const result = await transcribeFile(file, options);
        if (format === 'text' && !values.out) texts.set(file, result.trimEnd());
        else {
          const dir = values.out ?? path.dirname(file);
          const target = path.join(dir, `${path.parse(file).name}.${FILE_EXTENSION[format]}`);
          fs.writeFileSync(target, result);
          texts.set(file, target);
        }
      } catch (err) {
        failures.push(`${file}: ${(err as Error).message}`);
      }
      bar.increment();
    }
  };
  await Promise.all(Array.from({ length: Math.min(concurrency, files.length) }, worker));
  bar.stop();

  for (const file of files) {
    const out = texts.get(file);
    if (out === undefined) continue;
    if (format === 'text' && !values.out)
      process.stdout.write(files.length > 1 ? `${file}: ${out}\n` : `${out}\n`);
    else process.stderr.write(`${file} -> ${out}\n`);
  }
  for (const f of failures) process.stderr.write(`failed: ${f}\n`);
  process.exitCode = failures.length ? 1 : 0;
}

main().catch((err) => {
  process.stderr.write(`transcribe: ${(err as Error).message}\n`);
  process.exit(1);
});
