/**
 * The command-line clients' surface: `npm run stream -- -` reads audio in any
 * format from stdin (a microphone pipe), and `npm run transcribe` shows per-file
 * progress (upload, then decode; for a URL, the batch job's steps).
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { expect } from 'chai';
import { ffmpegConvert, wer } from '../speech/helpers.js';
import { AUDIO_DIR, realtimeWithBuiltinEngine, refs } from '../realtime/helpers.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { issueServiceKey, REPO_ROOT, startService, type RunningService } from '../helpers/service.js';
import { startFileServer, type FileServer } from '../batch/helpers.js';
import { BUILTIN_PLANS } from '../../shared/plans.js';

function run(
  cli: string,
  args: string[],
  stdin?: Buffer,
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['--import', 'tsx', path.join(REPO_ROOT, cli), ...args], {
      cwd: REPO_ROOT,
      env: { PATH: process.env.PATH!, HOME: process.env.HOME ?? '/root' },
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    child.on('close', (code) => resolve({ code, stdout, stderr }));
    child.stdin.on('error', () => {});
    child.stdin.end(stdin);
  });
}

const JFK =
  'and so my fellow americans ask not what your country can do for you ask what you can do for your country';

describe('CLI: stream from stdin', function () {
  this.timeout(120_000);
  const context = realtimeWithBuiltinEngine();

  it('`npm run stream -- -` streams an MP3 piped on stdin and prints its utterances', async () => {
    const ctx = context();
    const { key } = await ctx.issueKey('pro');
    const file = 'librispeech-1089-134686-0001.wav';
    const mp3 = await ffmpegConvert(fs.readFileSync(path.join(AUDIO_DIR, file)), ['-f', 'mp3']);
    const r = await run('cli/stream.ts', ['-', '--url', ctx.base, '--key', key, '--pace', '4'], mp3);
    // How the server saw the session end (uWebSockets.js gives its reason for a 1006).
    const ends = ctx.logs.lines.filter((l) => l.includes('realtime session ended')).join('\n');
    expect(r.code, `${r.stderr}\n${ends}`).to.equal(0);
    const lines = r.stdout.trim().split('\n');
    lines.forEach((l, i) => expect(l).to.match(new RegExp(`^#${i} \\d+:\\d\\d\\.\\d `)));
    const text = lines.map((l) => l.split(' ').slice(2).join(' ')).join(' ');
    expect(wer(refs().get(file)!, text), text).to.be.below(0.6);
  });
});

describe('CLI: transcribe progress, files and URLs', function () {
  this.timeout(300_000);
  let db: TestDatabase;
  let svc: RunningService;
  let files: FileServer;
  let key: string;

  before(async () => {
    db = await createTestDatabase('stt_cli');
    files = await startFileServer(path.join(REPO_ROOT, 'samples'));
    svc = await startService({
      DATABASE_URL: db.url,
      OUTBOUND_ALLOW: '127.0.0.1',
      // Generous decode limits: the test machine is shared and loaded.
      STT_BUILTIN_TIMEOUT_BASE_MS: '120000',
      // A plan whose audio window jfk.wav (11 s) fills.
      PLANS_JSON: JSON.stringify({ eleven: { ...BUILTIN_PLANS.pro, maxAudioSecondsPerWindow: 11 } }),
    });
    key = (await issueServiceKey(svc, { owner_id: 'cli' })).key;
  });
  after(async () => {
    await svc?.stop();
    await files?.close();
    await db?.drop();
  });

  it('shows the bytes uploaded, then the decode, for a file', async () => {
    const r = await run('cli/transcribe.ts', [
      'samples/jfk.wav',
      '--url',
      svc.baseUrl,
      '--key',
      key,
      '--progress',
    ]);
    expect(r.code, r.stderr).to.equal(0);
    expect(wer(JFK, r.stdout)).to.be.below(0.5);
    expect(r.stderr).to.match(/jfk\.wav \[.*\] transcribing \(34\d KiB sent\)/);
  });

  it('runs a URL as a batch job, following its steps, and renders the result', async () => {
    const r = await run('cli/transcribe.ts', [
      `${files.url}/jfk.wav`,
      '--url',
      svc.baseUrl,
      '--key',
      key,
      '--format',
      'srt',
      '--out',
      path.join(svc.dataDir, 'subs'),
      '--progress',
    ]);
    expect(r.code, r.stderr).to.equal(0);
    expect(r.stderr).to.match(/jfk\.wav \[.*\] (queued|running): \w+ \(\d+\/\d+ steps\)/);
    const srt = fs.readFileSync(path.join(svc.dataDir, 'subs', 'jfk.srt'), 'utf8');
    expect(srt).to.match(/^1\n00:00:\d\d,\d{3} --> /);
    expect(r.stderr).to.include(`-> ${path.join(svc.dataDir, 'subs', 'jfk.srt')}`);
  });

  it('off a terminal, no progress lines unless --progress; with it, the files line ends at n/n', async () => {
    const dir = path.join(svc.dataDir, 'two');
    fs.mkdirSync(dir, { recursive: true });
    for (const n of ['a', 'b'])
      fs.copyFileSync(path.join(REPO_ROOT, 'samples/jfk.wav'), path.join(dir, `${n}.wav`));
    const args = [dir, '--url', svc.baseUrl, '--key', key, '--format', 'srt', '--out', path.join(dir, 'out')];
    const quiet = await run('cli/transcribe.ts', args);
    expect(quiet.code, quiet.stderr).to.equal(0);
    // Only the files written (the placeholders '{name} [...] {phase}' were printed here).
    expect(quiet.stderr.trim().split('\n'), quiet.stderr).to.have.length(2);
    for (const line of quiet.stderr.trim().split('\n')) expect(line).to.match(/\.wav -> .*\.srt$/);
    const shown = await run('cli/transcribe.ts', [...args, '--progress']);
    expect(shown.code, shown.stderr).to.equal(0);
    const filesLines = shown.stderr.split('\n').filter((l) => l.startsWith('files ['));
    expect(filesLines.at(-1), shown.stderr).to.match(/ 2\/2$/);
  });

  it('a used-up audio budget fails the file at once with the reason (before: five waits of 60 s)', async () => {
    const tiny = (await issueServiceKey(svc, { owner_id: 'cli-budget', plan: 'eleven' })).key;
    const args = ['samples/jfk.wav', '--url', svc.baseUrl, '--key', tiny];
    expect((await run('cli/transcribe.ts', args)).code).to.equal(0);
    const at = Date.now();
    const r = await run('cli/transcribe.ts', args);
    expect(r.code, r.stderr).to.equal(1);
    expect(r.stderr).to.match(/audio_quota_exhausted|audio budget of 11 s per window is used up/);
    expect(r.stderr).to.not.include('retrying');
    expect(Date.now() - at).to.be.below(30_000);
  });

  it('inputs of the same name written to one --out get files of their own, in the order given', async () => {
    const dir = path.join(svc.dataDir, 'same');
    const clips = { a: 'samples/jfk.wav', b: 'test/audio/librispeech-1089-134686-0001.wav' };
    for (const [sub, clip] of Object.entries(clips)) {
      fs.mkdirSync(path.join(dir, sub), { recursive: true });
      fs.copyFileSync(path.join(REPO_ROOT, clip), path.join(dir, sub, 'x.wav'));
    }
    const out = path.join(dir, 'out');
    const r = await run('cli/transcribe.ts', [
      path.join(dir, 'a/x.wav'),
      path.join(dir, 'b/x.wav'),
      ...['--url', svc.baseUrl, '--key', key, '--format', 'vtt', '--out', out],
    ]);
    expect(r.code, r.stderr).to.equal(0);
    expect(fs.readdirSync(out).sort()).to.deep.equal(['x-2.vtt', 'x.vtt']);
    expect(r.stderr).to.include(`b/x.wav -> ${path.join(out, 'x-2.vtt')}`);
    const words = (f: string) =>
      fs
        .readFileSync(path.join(out, f), 'utf8')
        .split('\n')
        .filter((l) => l && !l.includes('-->') && !/^(WEBVTT|\d+)$/.test(l))
        .join(' ');
    expect(wer(JFK, words('x.vtt'))).to.be.below(0.5);
    expect(wer(JFK, words('x-2.vtt'))).to.be.above(0.8);
  });
});
