/**
 * The realtime command-line client (cli/stream.ts) against a real realtime
 * server with real speech: it streams a file and prints each utterance.
 */
import { spawn } from 'node:child_process';
import path from 'node:path';
import { expect } from 'chai';
import { wer } from '../speech/helpers.js';
import { dropFirstUpgrade } from '../helpers/dropFirstUpgrade.js';
import { AUDIO_DIR, realtimeWithBuiltinEngine, refs, repoRoot, type RealtimeTestContext } from './helpers.js';

function run(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(
      process.execPath,
      ['--import', 'tsx', path.join(repoRoot, 'cli/stream.ts'), ...args],
      {
        cwd: repoRoot,
      },
    );
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

describe('realtime: the stream command-line client', function () {
  this.timeout(60_000);
  const context = realtimeWithBuiltinEngine();
  let ctx: RealtimeTestContext;
  beforeEach(() => {
    ctx = context();
  });

  it('streams a file faster than real time and prints one line per utterance', async () => {
    const { key } = await ctx.issueKey('pro');
    const file = 'librivox-austen-0880.wav';
    const r = await run([path.join(AUDIO_DIR, file), '--url', ctx.base, '--key', key, '--pace', '4']);
    expect(r.code, r.stderr).to.equal(0);
    const lines = r.stdout.trim().split('\n');
    expect(lines.length).to.be.at.least(1);
    lines.forEach((l, i) => expect(l).to.match(new RegExp(`^#${i} \\d+:\\d\\d\\.\\d `)));
    const text = lines.map((l) => l.split(' ').slice(2).join(' ')).join(' ');
    expect(wer(refs().get(file)!, text)).to.be.below(0.6);
  });

  it('says so when an utterance has no words, as the playground does', async () => {
    // jfk.wav ends with half a second of noise: the VAD opens an utterance there, the decoder finds no word.
    const { key } = await ctx.issueKey('pro');
    const r = await run([path.join(AUDIO_DIR, 'jfk.wav'), '--url', ctx.base, '--key', key, '--pace', '4']);
    expect(r.code, r.stderr).to.equal(0);
    const lines = r.stdout.trim().split('\n');
    expect(lines.at(-1)).to.match(/^#\d+ \d+:\d\d\.\d \(no words\)$/);
    for (const l of lines) expect(l).to.match(/^#\d+ \d+:\d\d\.\d \S/);
  });

  it('says why when the key is refused', async () => {
    const r = await run([
      path.join(AUDIO_DIR, 'jfk.wav'),
      '--url',
      ctx.base,
      '--key',
      'sk-' + 'x'.repeat(40),
    ]);
    expect(r.code).to.equal(1);
    expect(r.stderr).to.match(/refused the connection: HTTP 401 .*invalid_api_key/);
  });

  it('opens the connection again when it closes before the session starts, and streams all of the file', async () => {
    // The first connection is dropped after its 101, as uWebSockets.js 20.57's cork bug does.
    const proxy = await dropFirstUpgrade(ctx.base);
    try {
      const { key } = await ctx.issueKey('pro');
      const file = 'librivox-austen-0880.wav';
      const r = await run([path.join(AUDIO_DIR, file), '--url', proxy.url, '--key', key, '--pace', '4']);
      expect(r.code, r.stderr).to.equal(0);
      expect(proxy.upgrades()).to.equal(2);
      expect(r.stderr).to.match(/closed \(1006\) before the session started; connecting again/);
      const text = r.stdout
        .trim()
        .split('\n')
        .map((l) => l.split(' ').slice(2).join(' '))
        .join(' ');
      expect(wer(refs().get(file)!, text)).to.be.below(0.6);
    } finally {
      await proxy.close();
    }
  });
});
