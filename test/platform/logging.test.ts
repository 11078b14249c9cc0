import { expect } from 'chai';
import { execFile } from 'node:child_process';
import path from 'node:path';
import { promisify } from 'node:util';
import { fileURLToPath } from 'node:url';
import request from 'supertest';
import { createTestApp, issueKey } from '../helpers/app.js';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

describe('logging', () => {
  it('writes one access line per request, with the request id and key id, scrubbed of secrets', async () => {
    const t = await createTestApp();
    try {
      const { key, id } = await issueKey(t, { plan: 'pro' });
      await request(t.server)
        .post('/v1/audio/transcriptions/session-token')
        .set('Authorization', `Bearer ${key}`)
        .set('X-Request-Id', 'req-abc-123')
        .expect(200);
      await request(t.server).get(`/v1/${key}/"quoted"\\back/é`).expect(404);
      const access = t.logs.lines.map((l) => JSON.parse(l)).filter((l) => l.msg === 'request');
      expect(access).to.have.length(2);
      expect(access[0]).to.include({
        reqId: 'req-abc-123',
        method: 'POST',
        path: '/v1/audio/transcriptions/session-token',
        status: 200,
        keyId: id,
      });
      expect(access[0].ms).to.be.a('number');
      expect(access[0]).not.to.have.property('sample');
      expect(access[1]).to.include({ method: 'GET', status: 404 });
      expect(access[1].path).to.match(/^\/v1\/sk-\[redacted\]\//);
      expect(t.logs.text).not.to.include(key.slice(3));
    } finally {
      await t.close();
    }
  });

  it('with ACCESS_LOG_SAMPLE, logs that share of successful requests and every refused one', async () => {
    const t = await createTestApp({ ACCESS_LOG_SAMPLE: '0.000001' });
    try {
      const { key } = await issueKey(t, { plan: 'pro' });
      for (let i = 0; i < 20; i++) await request(t.server).get('/health').expect(200);
      await request(t.server)
        .post('/v1/audio/transcriptions/session-token')
        .set('Authorization', `Bearer ${key}`)
        .expect(200);
      await request(t.server)
        .post('/v1/audio/transcriptions/session-token')
        .set('Authorization', 'Bearer sk-unknownunknownunknown')
        .expect(401);
      await request(t.server).get('/no/such/route').expect(404);
      const access = t.logs.lines.map((l) => JSON.parse(l)).filter((l) => l.msg === 'request');
      expect(access.map((l) => l.status)).to.deep.equal([401, 404]);
      expect(access[0].sample).to.equal(0.000001);
    } finally {
      await t.close();
    }
  });

  it('refuses an ACCESS_LOG_SAMPLE outside (0, 1]', async () => {
    const { loadConfig } = await import('../../shared/config/index.js');
    for (const bad of ['0', '1.5', '-1', 'half'])
      expect(() => loadConfig({ ACCESS_LOG_SAMPLE: bad })).to.throw(/ACCESS_LOG_SAMPLE/);
    expect(loadConfig({}).accessLogSample).to.equal(1);
  });

  it('writes no access line when info is off', async () => {
    const t = await createTestApp({ LOG_LEVEL: 'warn' });
    try {
      await request(t.server).get('/health').expect(200);
      await request(t.server).get('/no/such/route').expect(404);
      expect(t.logs.lines.map((l) => JSON.parse(l)).filter((l) => l.msg === 'request')).to.deep.equal([]);
    } finally {
      await t.close();
    }
  });

  it('writes every buffered stdout line at exit, a normal exit or a crash', async () => {
    const script = `
      import { createLogger } from './shared/logger.ts';
      const a = createLogger({ name: 'a' });
      const b = createLogger({ name: 'b' });
      for (let i = 0; i < 5; i++) a.info({ i }, 'line');
      b.warn('from b');
      if (process.argv[1] === 'crash') throw new Error('boom');
      process.exit(0);`;
    for (const how of ['exit', 'crash']) {
      const out = await promisify(execFile)(
        process.execPath,
        ['--import', 'tsx', '--input-type=module', '-e', script, how],
        { cwd: root },
      )
        .then((r) => ({ ...r, code: 0 }))
        .catch((err: { stdout: string; code: number }) => err);
      expect(out.code).to.equal(how === 'crash' ? 1 : 0);
      const lines = out.stdout
        .split('\n')
        .filter(Boolean)
        .map((l) => JSON.parse(l));
      expect(lines.map((l) => l.msg)).to.deep.equal(['line', 'line', 'line', 'line', 'line', 'from b']);
    }
  });
});
