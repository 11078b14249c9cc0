/**
 * Retention (issue 41): finished workflows are deleted BATCH_RETENTION_DAYS
 * after they ended, with their steps, deliveries and artifacts; before,
 * nothing ever left batch_workflows (20 submissions with a 986 KB field grew
 * it from 736 kB to 20 MB).
 */
import fs from 'node:fs';
import path from 'node:path';
import { expect } from 'chai';
import request from 'supertest';
import { tenantStore } from '../../api/batch/storage/index.js';
import {
  buildRecording,
  createBatchTestApp,
  issueKey,
  randomId,
  startFileServer,
  tmpDir,
  waitFor,
  type BatchTestApp,
  type FileServer,
} from './helpers.js';

describe('batch: retention of finished workflows', function () {
  this.timeout(90_000);
  let t: BatchTestApp;
  let files: FileServer;
  const dir = tmpDir('batch-retention-');
  before(async () => {
    buildRecording(path.join(dir, 'short.wav'), ['librivox-austen-0880.wav']);
    files = await startFileServer(dir);
    t = await createBatchTestApp({ BATCH_RETENTION_DAYS: '1' }, { start: true });
  });
  after(async () => {
    await t?.close();
    await files?.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('deletes workflows a day past their end with their steps and artifacts, and keeps the rest', async () => {
    const { key } = await issueKey(t, { ownerId: 'tenant-retention', plan: 'pro' });
    const run = async (requestId: string) => {
      const r = await request(t.server)
        .post('/v1/audio/transcriptions/jobs')
        .set('authorization', `Bearer ${key}`)
        .send({ audio_url: `${files.url}/short.wav`, request_id: requestId });
      const id = r.body.workflow_id as string;
      await waitFor(
        async () => (await t.deps.db('batch_workflows').where({ id }).first()).status === 'complete',
        60_000,
        200,
      );
      return id;
    };
    const oldRequest = randomId('old');
    const old = await run(oldRequest);
    const recent = await run(randomId('recent'));
    const store = tenantStore(t.runtime.store, 'tenant-retention');
    expect(await store.list(`transcription/${oldRequest}/`)).to.not.be.empty;
    await t.deps
      .db('batch_workflows')
      .where({ id: old })
      .update({ ended_at: t.deps.db.raw("now() - interval '25 hours'") });

    expect(await t.runtime.retention.expire(true)).to.equal(1);
    expect(await t.deps.db('batch_workflows').where({ id: old }).first()).to.equal(undefined);
    expect(await t.deps.db('batch_steps').where({ workflow_id: old })).to.deep.equal([]);
    expect(await store.list(`transcription/${oldRequest}/`)).to.deep.equal([]);
    expect((await t.deps.db('batch_workflows').where({ id: recent }).first()).status).to.equal('complete');
    const poll = await request(t.server)
      .get(`/v1/audio/transcriptions/jobs/${old}`)
      .set('authorization', `Bearer ${key}`);
    expect(poll.status).to.equal(404);
  });
});
