/**
 * The realtime command-line client (cli/stream.ts) against a real realtime
 * server with real speech: it streams a file and prints each utterance.
 */
import { spawn } from 'node:child_process';
import net from 'node:net';
import path from 'node:path';
import { expect } from 'chai';
import { wer } from '../speech/helpers.js';
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
    // A proxy that passes the first connection's upgrade answer and then drops it, as uWebSockets.js
    // 20.57's cork bug does (the client saw 101 and no event); later connections pass untouched.
    const target = new URL(ctx.base);
    let connections = 0;
    const proxy = net.createServer((client) => {
      const first = connections++ === 0;
      const server = net.connect(Number(target.port), target.hostname);
      client.pipe(server);
      let head = Buffer.alloc(0);
      server.on('data', (d: Buffer) => {
        if (!first) return void client.write(d);
        head = Buffer.concat([head, d]);
        const end = head.indexOf('\r\n\r\n');
        if (end < 0) return;
        client.write(head.subarray(0, end + 4), () => {
          client.destroy();
          server.destroy();
        });
      });
      client.on('error', () => server.destroy());
      server.on('error', () => client.destroy());
      client.on('close', () => server.destroy());
    });
    await new Promise<void>((r) => proxy.listen(0, '127.0.0.1', r));
    try {
      const { key } = await ctx.issueKey('pro');
      const port = (proxy.address() as net.AddressInfo).port;
      const file = 'librivox-austen-0880.wav';
      const r = await run([
        path.join(AUDIO_DIR, file),
        '--url',
        `http://127.0.0.1:${port}`,
        '--key',
        key,
        '--pace',
        '4',
      ]);
      expect(r.code, r.stderr).to.equal(0);
      expect(connections).to.equal(2);
      expect(r.stderr).to.match(/closed \(1006\) before the session started; connecting again/);
      const text = r.stdout
        .trim()
        .split('\n')
        .map((l) => l.split(' ').slice(2).join(' '))
        .join(' ');
      expect(wer(refs().get(file)!, text)).to.be.below(0.6);
    } finally {
      await new Promise((r) => proxy.close(r));
    }
  });
});
