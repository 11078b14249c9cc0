/** Outbound fetch safety: schemes, refused addresses (default), redirects, DNS answers, caps. */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { expect } from 'chai';
import { AddressPolicy, isPublicAddress, OutboundClient, OutboundError } from '../../api/batch/net/index.js';

async function expectCode(p: Promise<unknown>, code: string): Promise<void> {
  try {
    await p;
  } catch (err) {
    expect(err).to.be.instanceOf(OutboundError);
    expect((err as OutboundError).code, (err as Error).message).to.equal(code);
    return;
  }
  expect.fail(`expected ${code}`);
}

describe('net: outbound fetch guard', function () {
  this.timeout(15_000);
  let server: http.Server;
  let base: string;
  let port: number;
  before(async () => {
    server = http.createServer((req, res) => {
      const url = new URL(req.url ?? '/', 'http://x');
      if (url.pathname === '/redirect')
        return void res.writeHead(302, { location: url.searchParams.get('to')! }).end();
      if (url.pathname === '/loop') return void res.writeHead(302, { location: '/loop' }).end();
      if (url.pathname === '/big') {
        res.writeHead(200);
        return void res.end(Buffer.alloc(100_000));
      }
      if (url.pathname === '/slow') return void setTimeout(() => res.end('late'), 2000);
      res.end('hello');
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    port = (server.address() as AddressInfo).port;
    base = `http://127.0.0.1:${port}`;
  });
  after(() => {
    server.closeAllConnections();
    server.close();
  });

  it('classifies addresses', () => {
    for (const a of ['8.8.8.8', '2001:4860:4860::8888', '::ffff:1.1.1.1'])
      expect(isPublicAddress(a), a).to.equal(true);
    for (const a of [
      '127.0.0.1',
      '10.0.0.1',
      '172.16.0.1',
      '192.168.1.1',
      '169.254.169.254',
      '::a9fe:a9fe', // IPv4-compatible IPv6 of the metadata address (issue 41, third pass)
      '::7f00:1',
      '::1',
      'fe80::1',
      'fd00:ec2::254',
      '::ffff:127.0.0.1',
      '0.0.0.0',
      '100.64.0.1',
      '224.0.0.1',
      'nonsense',
    ]) {
      expect(isPublicAddress(a), a).to.equal(false);
    }
    const p = new AddressPolicy(['127.0.0.1/32', 'internal.example']);
    expect(p.addressAllowed('127.0.0.1')).to.equal(true);
    expect(p.addressAllowed('127.0.0.2')).to.equal(false);
    expect(p.addressAllowed('10.0.0.1', 'internal.example')).to.equal(true);
  });

  it('by default refuses loopback by IP literal, by name (DNS answer) and metadata addresses', async () => {
    const strict = new OutboundClient();
    await expectCode(strict.request(`${base}/`), 'blocked_destination');
    await expectCode(strict.request(`http://localhost:${port}/`), 'blocked_destination');
    await expectCode(strict.request(`http://[::1]:${port}/`), 'blocked_destination');
    await expectCode(strict.request('http://169.254.169.254/latest/meta-data/'), 'blocked_destination');
    await expectCode(strict.request('http://10.1.2.3/'), 'blocked_destination');
    await expectCode(strict.request(`http://0x7f000001:${port}/`), 'blocked_destination');
  });

  it('refuses non-http schemes and credentials in URLs', async () => {
    const c = new OutboundClient(['127.0.0.1']);
    await expectCode(c.request('file:///etc/passwd'), 'invalid_url');
    await expectCode(c.request('ftp://127.0.0.1/x'), 'invalid_url');
    await expectCode(c.request('gopher://127.0.0.1/x'), 'invalid_url');
    await expectCode(c.request(`http://u:p@127.0.0.1:${port}/`), 'invalid_url');
  });

  it('fetches from an allow-listed address and follows redirects, checking each hop', async () => {
    const c = new OutboundClient(['127.0.0.1']);
    const r = await c.request(`${base}/redirect?to=${encodeURIComponent('/final')}`);
    expect(r.status).to.equal(200);
    expect(r.body.toString()).to.equal('hello');
    expect(r.remoteAddress).to.equal('127.0.0.1');
    // A redirect to a refused destination is refused even though the first hop was allowed.
    await expectCode(
      c.request(`${base}/redirect?to=${encodeURIComponent('http://169.254.169.254/')}`),
      'blocked_destination',
    );
    await expectCode(
      c.request(`${base}/redirect?to=${encodeURIComponent(`http://[::1]:${port}/`)}`),
      'blocked_destination',
    );
    await expectCode(
      c.request(`${base}/redirect?to=${encodeURIComponent('http://192.168.0.1/')}`),
      'blocked_destination',
    );
    await expectCode(
      c.request(`${base}/redirect?to=${encodeURIComponent('file:///etc/passwd')}`),
      'invalid_url',
    );
    await expectCode(c.request(`${base}/loop`, { maxRedirects: 3 }), 'too_many_redirects');
  });

  it('caps size and time', async () => {
    const c = new OutboundClient(['127.0.0.1']);
    await expectCode(c.request(`${base}/big`, { maxBytes: 1000 }), 'too_large');
    await expectCode(c.request(`${base}/slow`, { timeoutMs: 300 }), 'timeout');
    const ok = await c.request(`${base}/big`, { maxBytes: 200_000 });
    expect(ok.bytes).to.equal(100_000);
  });

  it('an already aborted request is refused "aborted" and throws nothing uncaught (it once crashed the process)', async () => {
    // The request was destroyed before its error listener was on: Node's "socket hang up" was uncaught.
    const uncaught: unknown[] = [];
    const hold = process.listeners('uncaughtException');
    process.removeAllListeners('uncaughtException');
    const record = (err: unknown) => uncaught.push(err);
    process.on('uncaughtException', record);
    try {
      const c = new OutboundClient(['127.0.0.1']);
      await expectCode(c.request(`${base}/slow`, { signal: AbortSignal.abort() }), 'aborted');
      await new Promise((r) => setTimeout(r, 100));
    } finally {
      process.off('uncaughtException', record);
      for (const l of hold) process.on('uncaughtException', l);
    }
    expect(uncaught.map(String)).to.deep.equal([]);
  });

  it('POSTs without following redirects', async () => {
    const c = new OutboundClient(['127.0.0.1']);
    const r = await c.request(`${base}/redirect?to=/x`, { method: 'POST', body: '{}' });
    expect(r.status).to.equal(302);
  });
});
