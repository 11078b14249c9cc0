/**
 * The official `openai` SDK's realtime client (`OpenAIRealtimeWS`, which
 * dials only wss://) against `npm start` with nothing but what its banner
 * prints (issue 39: it failed with EPROTO against the plain-HTTP start, and
 * behind TLS the sample sent faster than real time and lost 2 of jfk.wav's
 * 4 utterances on the free plan without saying so). A fresh data directory:
 * the start makes its local CA, serves HTTPS and wss:// beside HTTP, and
 * prints the NODE_EXTRA_CA_CERTS line; samples/openai-realtime.mjs, run as
 * the README says with that line, prints every utterance on a free key.
 */
import { spawnSync } from 'node:child_process';
import { expect } from 'chai';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { issueServiceKey, REPO_ROOT, startService, type RunningService } from '../helpers/service.js';
import { wer } from '../speech/helpers.js';

const JFK =
  'and so my fellow americans ask not what your country can do for you ask what you can do for your country';

describe('the OpenAI SDK realtime client against npm start (wss:// with the local CA)', function () {
  this.timeout(300_000);
  let db: TestDatabase;
  let svc: RunningService;

  before(async () => {
    db = await createTestDatabase('stt_oa_sdk');
    svc = await startService({ DATABASE_URL: db.url, STT_BUILTIN_TIMEOUT_BASE_MS: '120000' });
  });
  after(async () => {
    await svc?.stop();
    await db?.drop();
  });

  it('transcribes every utterance of jfk.wav over wss://, paced, on a free key', async () => {
    const out = svc.output();
    const https = /HTTPS and wss:\/\/ on (https:\/\/localhost:\d+)/.exec(out)?.[1];
    const ca = /NODE_EXTRA_CA_CERTS=(\S+)/.exec(out)?.[1];
    expect(https, out).to.be.a('string');
    expect(ca!.startsWith(svc.dataDir), 'the CA is kept in the data directory').to.equal(true);
    const { key } = await issueServiceKey(svc, { owner_id: 'sdk-walkthrough', plan: 'free' });
    const run = spawnSync(process.execPath, ['samples/openai-realtime.mjs', https!, key, 'samples/jfk.wav'], {
      cwd: REPO_ROOT,
      env: { PATH: process.env.PATH!, HOME: process.env.HOME ?? '/root', NODE_EXTRA_CA_CERTS: ca! },
      encoding: 'utf8',
      timeout: 120_000,
    });
    expect(run.status, `${run.stdout}\n${run.stderr}`).to.equal(0);
    expect(run.stderr).to.not.match(/dropped|error/i);
    const lines = run.stdout.trim().split('\n').filter(Boolean);
    expect(lines.length, run.stdout).to.be.at.least(3);
    expect(wer(JFK, lines.join(' ')), run.stdout).to.be.below(0.5);
  });
});
