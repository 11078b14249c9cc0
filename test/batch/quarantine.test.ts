/**
 * A workflow that stops its worker is quarantined (issue 41): before, one
 * batch request blocked the event loop of the API that ran it, and when its
 * lease lapsed the next API took it over and died too, again after every
 * restart. Real worker processes here hang on a poisoned workflow (the
 * fixture's busy loop): pg-boss sees the job's heartbeat stop while the
 * process is still there and retries it elsewhere. After two of them, the
 * third errors the workflow with `workflow_quarantined` and goes on
 * serving other jobs.
 */
import type { ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { expect } from 'chai';
import request from 'supertest';
import { WORKFLOW_QUEUE } from '../../api/batch/runtime.js';
import { issueKey, randomId, startWorkerProcess, batchSuite, waitFor } from './helpers.js';

describe('batch: a workflow that stops its workers is quarantined', function () {
  this.timeout(180_000);
  const children: ChildProcess[] = [];
  const s = batchSuite({
    prefix: 'quarantine',
    recordings: { 'clip.wav': { clips: ['jfk.wav'], gap: 0.5 } },
    run: 'producer',
    // Reads the workflow's job through pg-boss's API.
    boss: true,
  });
  s.cleanup(() => children.forEach((c) => c.exitCode === null && c.kill('SIGKILL')));

  const kill = async (c: ChildProcess) => {
    c.kill('SIGKILL');
    if (c.exitCode === null && c.signalCode === null) await new Promise((r) => c.once('exit', r));
  };

  it('after two crashed runs the next worker errors it and serves the next job', async () => {
    const { key } = await issueKey(s.t, { ownerId: 'tenant-poison', plan: 'pro' });
    const callLog = path.join(s.dir, 'calls.log');
    fs.writeFileSync(callLog, '');
    const submit = async (requestId: string) => {
      const r = await request(s.t.server)
        .post('/v1/audio/transcriptions/jobs')
        .set('authorization', `Bearer ${key}`)
        .send({ audio_url: `${s.files.url}/clip.wav`, request_id: requestId });
      expect(r.status).to.equal(202);
      return r.body.workflow_id as string;
    };
    const row = (id: string) => s.t.deps.db('batch_workflows').where({ id }).first();
    const poisoned = await submit(randomId('poison'));
    fs.writeFileSync(`${callLog}.poison`, poisoned);

    // Two workers in turn take the workflow and hang on it: pg-boss fails the job for a retry while the
    // hung process is still there (its heartbeat stopped); each is then killed.
    for (let crash = 1; crash <= 2; crash++) {
      const w = await startWorkerProcess(s.t, callLog);
      children.push(w);
      await waitFor(async () => (await row(poisoned)).runs === crash, 60_000, 100);
      expect((await row(poisoned)).lapses).to.equal(crash - 1);
      const jobId = (await row(poisoned)).job_id as string;
      await waitFor(
        async () => {
          const [job] = await s.boss.findJobs(WORKFLOW_QUEUE, { id: jobId });
          return job.state === 'retry' && job.retryCount === crash - 1;
        },
        60_000,
        200,
      );
      expect(w.exitCode, 'hung, not dead').to.equal(null);
      await kill(w);
    }

    const w3 = await startWorkerProcess(s.t, callLog);
    children.push(w3);
    const done = await waitFor(
      async () => {
        const r = await row(poisoned);
        return r.status === 'errored' ? r : undefined;
      },
      60_000,
      100,
    );
    expect(done.error.name).to.equal('workflow_quarantined');
    expect(done.lapses).to.equal(2);
    const poll = await request(s.t.server)
      .get(`/v1/audio/transcriptions/jobs/${poisoned}`)
      .set('authorization', `Bearer ${key}`);
    expect(poll.body.status).to.equal('errored');
    expect(poll.body.error.name).to.equal('workflow_quarantined');

    // The worker that set it aside lives and runs the next job to the end.
    const next = await submit(randomId('after'));
    const ok = await waitFor(
      async () => {
        const r = await row(next);
        return r.status === 'complete' || r.status === 'errored' ? r : undefined;
      },
      90_000,
      200,
    );
    expect(ok.status, JSON.stringify(ok.error)).to.equal('complete');
    expect(w3.exitCode).to.equal(null);
  });
});
