/**
 * Command-line client for the segment endpoint (or any OpenAI-compatible
 * transcription server, engine/ workers included), and for batch jobs when an
 * input is an http(s) URL.
 *
 *   npm run transcribe -- clip.mp3 --key sk-...            # prints the text
 *   npm run transcribe -- talks/ --format srt --out subs/  # one .srt per file
 *   npm run transcribe -- https://example.com/talk.mp3     # a batch job, polled to the end
 *
 * Progress on stderr (when it is a terminal), one line per file in flight:
 * bytes uploaded, then the server's decode; for a URL, the batch job's steps.
 *
 * Options:
 *   --url URL          base URL (default $STT_BASE_URL or http://127.0.0.1:8080)
 *   --key KEY          API key (default $STT_API_KEY; keep keys out of shell history)
 *   --format F         text (default, printed) | json | verbose_json | srt | vtt (written to files)
 *   --out DIR          where files go (default: beside each input; same names get -2, -3, ...)
 *   --language L, --prompt P, --model M, --worker-id W
 *   --concurrency N    files in flight at once (default 2)
 *
 * 429 answers are retried after their Retry-After when it is at most a
 * minute (a used-up audio budget answers hours: the file fails at once);
 * 502/503 once (the interface lets the client resend). Exit code 1 when
 * any file failed.
 */
import fs from 'node:fs';
import path from 'node:path';
import cliProgress from 'cli-progress';
import { parseCliArgs } from './args.js';
import {
  RESPONSE_FORMATS,
  isResponseFormat,
  renderTranscript,
  type ResponseFormat,
} from '../shared/stt/formats.js';

/** Longest Retry-After the command waits out before trying again. */
const MAX_RETRY_WAIT_SECONDS = 60;

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

const HELP = `usage: npm run transcribe -- <file|folder|url>... [options]

Transcribes audio files (a folder: every audio file in it) through
POST /v1/audio/transcriptions, and http(s) URLs as batch jobs
(POST /v1/audio/transcriptions/jobs, polled until done). Progress on stderr:
per file, the bytes uploaded then the decode; per URL, the job's steps.

  --url URL          base URL (default $STT_BASE_URL or http://127.0.0.1:8080)
  --key KEY          API key (default $STT_API_KEY; keep keys out of shell history)
  --format F         text (default: printed) | json | verbose_json | srt | vtt (written to files)
  --out DIR          where files go (default: beside each input; same names get -2, -3, ...)
  --language L       language hint, e.g. en
  --prompt P         context prompt
  --model M          model name passed to the service (default whisper-1)
  --worker-id W      pin a speech worker
  --concurrency N    files in flight at once (default 2)
  --progress         progress lines even when stderr is not a terminal

429 answers are retried after their Retry-After when it is at most 60 s
(a used-up audio budget fails at once), 502/503 once. Exit code 1 when any
file failed, 2 for a usage error.
`;

function usage(message?: string): never {
  if (message) process.stderr.write(`transcribe: ${message}\n\n`);
  process.stderr.write(HELP);
  process.exit(message ? 2 : 0);
}
const isUrl = (p: string) => /^https?:\/\//i.test(p);

function listInputs(paths: string[]): string[] {
  const files: string[] = [];
  for (const p of paths) {
    if (isUrl(p)) {
      files.push(p);
      continue;
    }
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

/** What a file's progress line shows: a fraction and a phase. */
type Progress = (value: number, total: number, phase: string) => void;

const kib = (n: number) => `${Math.ceil(n / 1024)} KiB`;

/** fetch() with a streamed body, reporting the bytes handed to the connection. */
/** The parts of a job poll (interface 2.3) the CLI reads. */
interface JobPoll {
  status: string;
  steps?: { name: string; status: string }[];
  output?: {
    result: {
      segments: BatchSegment[];
      metadata: { language: string };
      summary: { total_duration: number };
    };
  };
  error?: { message?: string };
}

async function postWithProgress(
  url: string,
  key: string,
  form: FormData,
  progress: Progress,
): Promise<Response> {
  // The multipart encoding of the form, as fetch would send it.
  const encoded = new Request(url, { method: 'POST', body: form });
  const bytes = new Uint8Array(await encoded.arrayBuffer());
  let sent = 0;
  const body = new ReadableStream<Uint8Array>({
    pull(controller) {
      if (sent >= bytes.length) {
        progress(1, 1, `transcribing (${kib(bytes.length)} sent)`);
        return controller.close();
      }
      const chunk = bytes.subarray(sent, Math.min(bytes.length, sent + 64 * 1024));
      sent += chunk.length;
      controller.enqueue(chunk);
      progress(sent, bytes.length, `uploading ${kib(sent)} / ${kib(bytes.length)}`);
    },
  });
  return fetch(url, {
    method: 'POST',
    headers: {
      authorization: `Bearer ${key}`,
      'content-type': encoded.headers.get('content-type')!,
      'content-length': String(bytes.length),
    },
    body,
    duplex: 'half',
  } as RequestInit);
}

/** fetch's "fetch failed" names neither the address nor the reason: say both. */
function unreachable(endpoint: string) {
  return (err: Error & { cause?: { code?: string; message?: string } }): never => {
    throw new Error(`cannot reach ${endpoint}: ${err.cause?.code ?? err.cause?.message ?? err.message}`);
  };
}

/** The message of an error body of any plane. */
function errorMessage(status: number, body: string): string {
  try {
    const e = JSON.parse(body) as { error?: { message?: string; code?: string } | string };
    return `HTTP ${status} ${typeof e.error === 'string' ? e.error : `${e.error?.code}: ${e.error?.message}`}`;
  } catch {
    return `HTTP ${status} ${body}`;
  }
}

async function transcribeFile(file: string, o: Options, progress: Progress): Promise<string> {
  const data = fs.readFileSync(file);
  for (let attempt = 1; ; attempt++) {
    const form = new FormData();
    form.append('file', new Blob([data]), path.basename(file));
    form.append('model', o.model);
    form.append('response_format', o.format);
    if (o.language) form.append('language', o.language);
    if (o.prompt) form.append('prompt', o.prompt);
    if (o.workerId) form.append('worker_id', o.workerId);
    const endpoint = `${o.url.replace(/\/+$/, '')}/v1/audio/transcriptions`;
    const res = await postWithProgress(endpoint, o.key, form, progress).catch(unreachable(endpoint));
    const body = await res.text();
    if (res.ok)
      return o.format === 'json' || o.format === 'verbose_json'
        ? `${JSON.stringify(JSON.parse(body), null, 2)}\n`
        : body;
    const retryAfter = Number(res.headers.get('retry-after') ?? 1);
    // A wait longer than a minute (a used-up audio budget frees as its window rolls: hours) fails now.
    const retryable =
      (res.status === 429 && attempt <= 5 && retryAfter <= MAX_RETRY_WAIT_SECONDS) ||
      ((res.status === 502 || res.status === 503) && attempt <= 1);
    if (!retryable) throw new Error(errorMessage(res.status, body));
    progress(0, 1, `HTTP ${res.status}, retrying in ${retryAfter} s`);
    await new Promise((r) => setTimeout(r, Math.min(MAX_RETRY_WAIT_SECONDS, Math.max(1, retryAfter)) * 1000));
  }
}

interface BatchSegment {
  id: number;
  start_time: number;
  end_time: number;
  text: string;
  confidence: number;
}

/** A URL as a batch job: submit, poll (showing the steps), render the result in the asked format. */
async function transcribeUrl(audioUrl: string, o: Options, progress: Progress): Promise<string> {
  const base = o.url.replace(/\/+$/, '');
  const call = async (p: string, init: RequestInit = {}) => {
    const res = await fetch(`${base}${p}`, {
      ...init,
      headers: { authorization: `Bearer ${o.key}`, 'content-type': 'application/json' },
    }).catch(unreachable(`${base}${p}`));
    const body = await res.text();
    if (!res.ok) throw new Error(errorMessage(res.status, body));
    return JSON.parse(body) as Record<string, any>;
  };
  const job = {
    audio_url: audioUrl,
    ...(o.language ? { language: o.language } : {}),
    ...(o.prompt ? { prompt: o.prompt } : {}),
  };
  const accepted = await call('/v1/audio/transcriptions/jobs', { method: 'POST', body: JSON.stringify(job) });
  progress(0, 1, `queued ${accepted.workflow_id}`);
  for (;;) {
    await new Promise((r) => setTimeout(r, 1000));
    const poll = (await call(`/v1/audio/transcriptions/jobs/${accepted.workflow_id}`)) as JobPoll;
    const steps = poll.steps ?? [];
    const done = steps.filter((s) => s.status !== 'running').length;
    const current = steps.find((s) => s.status === 'running')?.name ?? poll.status;
    progress(done, Math.max(1, steps.length), `${poll.status}: ${current} (${done}/${steps.length} steps)`);
    if (poll.status === 'complete') {
      const r = poll.output!.result;
      const transcript = {
        text: r.segments.map((s) => s.text.trim()).join(' '),
        language: r.metadata.language,
        duration: r.summary.total_duration,
        segments: r.segments.map((s) => ({
          id: s.id,
          start: s.start_time,
          end: s.end_time,
          text: s.text,
          confidence: s.confidence,
        })),
        words: [],
      };
      const rendered = renderTranscript(transcript, o.format);
      return typeof rendered.body === 'string'
        ? rendered.body
        : `${JSON.stringify(rendered.body, null, 2)}\n`;
    }
    if (!['queued', 'running', 'waiting', 'paused'].includes(poll.status)) {
      throw new Error(`job ${accepted.workflow_id} ${poll.status}: ${poll.error?.message ?? 'no result'}`);
    }
  }
}

async function main(): Promise<void> {
  const { values, positionals, key } = parseCliArgs(
    {
      format: { type: 'string', default: 'text' },
      out: { type: 'string' },
      language: { type: 'string' },
      prompt: { type: 'string' },
      model: { type: 'string', default: 'whisper-1' },
      'worker-id': { type: 'string' },
      concurrency: { type: 'string', default: '2' },
      progress: { type: 'boolean', default: false },
    },
    usage,
  );
  if (positionals.length === 0) usage('give at least one file or folder');
  if (!isResponseFormat(values.format)) usage(`--format must be one of ${RESPONSE_FORMATS.join(', ')}`);
  const concurrency = Number(values.concurrency);
  if (!Number.isInteger(concurrency) || concurrency < 1) usage('--concurrency must be a positive integer');
  const format = values.format;
  const files = listInputs(positionals);
  if (files.length === 0) usage('no audio files found');
  if (values.out) fs.mkdirSync(values.out, { recursive: true });
  const options: Options = {
    url: values.url,
    key,
    format,
    language: values.language,
    prompt: values.prompt,
    model: values.model,
    workerId: values['worker-id'],
  };

  // One line per file in flight (bytes uploaded, then the decode; or a job's steps), and the files done.
  // Off a terminal without --progress there are no bars at all (cli-progress still printed each
  // bar's template once, '{name} [...] {phase}').
  const shown = Boolean(process.stderr.isTTY) || Boolean(values.progress);
  const bars = new cliProgress.MultiBar(
    {
      format: '{name} [{bar}] {phase}',
      hideCursor: true,
      stream: process.stderr,
      clearOnComplete: true,
      // Not a terminal: only with --progress, as a line every half second.
      noTTYOutput: values.progress,
      notTTYSchedule: 500,
    },
    cliProgress.Presets.shades_classic,
  );
  const noBar = { setTotal: () => {}, update: () => {} };
  const overall =
    files.length > 1 && shown
      ? bars.create(files.length, 0, { name: 'files', phase: `0/${files.length}` })
      : undefined;
  const targets = outputFiles(files, values.out, FILE_EXTENSION[format]);
  const texts = new Map<string, string>();
  const failures: string[] = [];
  let next = 0;
  let finished = 0;
  const worker = async () => {
    while (next < files.length) {
      const file = files[next++];
      const name = (
        isUrl(file) ? new URL(file).pathname.split('/').pop() || file : path.basename(file)
      ).slice(0, 40);
      const bar = shown ? bars.create(1, 0, { name, phase: 'starting' }) : undefined;
      const progress: Progress = (value, total, phase) => {
        (bar ?? noBar).setTotal(total);
        (bar ?? noBar).update(value, { phase });
      };
      try {
        const result = await (isUrl(file) ? transcribeUrl : transcribeFile)(file, options, progress);
        if (format === 'text' && !values.out) texts.set(file, result.trimEnd());
        else {
          const target = targets.get(file)!;
          fs.writeFileSync(target, result);
          texts.set(file, target);
        }
      } catch (err) {
        failures.push(`${file}: ${(err as Error).message}`);
      }
      if (bar) bars.remove(bar);
      overall?.update(++finished, { phase: `${finished}/${files.length}` });
    }
  };
  await Promise.all(Array.from({ length: Math.min(concurrency, files.length) }, worker));
  // The last state drawn before stopping (off a terminal lines are drawn on a schedule, which ended at n-1/n).
  if (shown) bars.update();
  bars.stop();

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

/**
 * Each input's output file: beside it (a URL's in the current directory) or in `dir`, named after it.
 * Inputs whose names would collide (`a/x.wav` and `b/x.wav` into one --out, or two URLs ending in
 * `audio.mp3`) get `x-2`, `x-3`, ... in the order given: one overwrote the other.
 */
function outputFiles(files: string[], dir: string | undefined, extension: string): Map<string, string> {
  const taken = new Set<string>();
  const out = new Map<string, string>();
  for (const file of files) {
    const where = dir ?? (isUrl(file) ? '.' : path.dirname(file));
    const stem = isUrl(file)
      ? path.parse(new URL(file).pathname).name || 'transcript'
      : path.parse(file).name;
    let target = path.join(where, `${stem}.${extension}`);
    for (let n = 2; taken.has(path.resolve(target)); n++)
      target = path.join(where, `${stem}-${n}.${extension}`);
    taken.add(path.resolve(target));
    out.set(file, target);
  }
  return out;
}

main().catch((err) => {
  process.stderr.write(`transcribe: ${(err as Error).message}\n`);
  process.exit(1);
});
