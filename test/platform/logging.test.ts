import { expect } from 'chai';
import { execFile } from 'node:child_process';
import path from 'node:path';
import { promisify } from 'node:util';
import { fileURLToPath } from 'node:url';
import { accessLogWriter, createLogger } from '../../shared/logger.js';
import request from 'supertest';
import { createTestApp, issueKey, LogCapture } from '../helpers/app.js';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

describe('logging', () => {
  it('writes the access line exactly as logger.info would, scrubbed of secrets', () => {
    const logs = new LogCapture();
    const logger = createLogger({ level: 'info', name: 'api' }, logs);
    const write = accessLogWriter(logger)!;
    const key = 'sk-' + 'k'.repeat(40);
    const cases: Parameters<typeof write>[] = [
      [
        '3f0c1a52-8d1e-4c55-9a43-0e4f3b0f2a11',
        'POST',
        '/v1/audio/transcriptions/session-token',
        200,
        0.4,
        'key_0123456789abcdef01234567',
      ],
      ['req-abc-123', 'GET', '/health', 404, 12, undefined],
      ['req-sampled', 'GET', '/health', 200, 0.2, undefined, 0.05],
      [key, 'GET', `/v1/${key}/"quoted"\\back/é`, 401, 1.5, undefined],
    ];
    for (const c of cases) {
      write(...c);
      const [reqId, method, p, status, ms, keyId, sample] = c;
      logger.info({ reqId, method, path: p, status, ms, keyId, sample }, 'request');
    }
    expect(logs.lines).to.have.length(cases.length * 2);
    for (let i = 0; i < logs.lines.length; i += 2) {
      const [fast, viaPino] = [JSON.parse(logs.lines[i]), JSON.parse(logs.lines[i + 1])];
      expect(Object.keys(fast)).to.deep.equal(Object.keys(viaPino));
      delete fast.time;
      delete viaPino.time;
      expect(fast).to.deep.equal(viaPino);
    }
    expect(logs.text).not.to.include(key.slice(3));
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

  it('is off when info is off', () => {
    expect(accessLogWriter(createLogger({ level: 'warn' }, new LogCapture()))).to.equal(undefined);
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
