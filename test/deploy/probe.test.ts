/**
 * docker/probe.sh, the compose healthchecks' HTTP probe (installed in the
 * image as `probe`; test/deploy/compose.test.ts runs it there through
 * `podman healthcheck run`). Here it runs with this machine's bash against
 * servers that answer 2xx, 503, nothing, or never.
 *   npx mocha test/deploy/probe.test.ts
 */
import { execFile } from 'node:child_process';
import http from 'node:http';
import net, { type AddressInfo } from 'node:net';
import path from 'node:path';
import { expect } from 'chai';
import { repoRoot } from '../realtime/helpers.js';

const script = path.join(repoRoot, 'docker', 'probe.sh');

function probe(port: number, urlPath: string): Promise<{ code: number; ms: number }> {
  const started = Date.now();
  return new Promise((resolve) => {
    execFile('bash', [script, String(port), urlPath], { timeout: 10_000 }, (err) =>
      resolve({ code: err ? Number((err as { code?: number }).code ?? -1) : 0, ms: Date.now() - started }),
    );
  });
}

async function listen(server: net.Server): Promise<number> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return (server.address() as AddressInfo).port;
}

describe('deploy: the compose healthcheck probe (docker/probe.sh)', function () {
  this.timeout(30_000);
  const servers: net.Server[] = [];
  const seen: string[] = [];
  after(() => servers.forEach((s) => s.close()));

  let port = 0;
  before(async () => {
    const server = http.createServer((req, res) => {
      seen.push(req.url ?? '');
      res.statusCode = req.url === '/readyz' ? 200 : req.url === '/204' ? 204 : 503;
      res.end('{}');
    });
    servers.push(server);
    port = await listen(server);
  });

  it('passes on a 2xx answer from the path it names', async () => {
    expect((await probe(port, '/readyz')).code).to.equal(0);
    expect((await probe(port, '/204')).code).to.equal(0);
    expect(seen).to.include.members(['/readyz', '/204']);
  });

  it('fails on a 503 (a draining or unready instance)', async () => {
    expect((await probe(port, '/readyz/instance')).code).to.equal(1);
  });

  it('fails when nothing listens on the port', async () => {
    const gone = net.createServer();
    const closed = await listen(gone);
    await new Promise((resolve) => gone.close(resolve));
    expect((await probe(closed, '/readyz')).code).to.equal(1);
  });

  it('gives up on a server that never answers before compose would (3 s)', async () => {
    const silent = net.createServer(() => {});
    servers.push(silent);
    const r = await probe(await listen(silent), '/readyz');
    expect(r.code).to.equal(1);
    expect(r.ms).to.be.below(3_000);
  });
});
