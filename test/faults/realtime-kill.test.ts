/**
 * Faults: the realtime process (realtime/main.ts) is killed (SIGKILL) while
 * its sessions stream real audio, and started again on its port, as a
 * supervisor would. Invariants: the clients see their sessions close, they
 * reconnect once the process is back and stream to the end; every session
 * is billed exactly once: the killed ones at their last checkpoint (lapsed
 * by the API process once their lease ran out), the new ones when they end.
 */
import fs from 'node:fs';
import { expect } from 'chai';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { connect, readPcm, silence, type Client } from '../realtime/helpers.js';
import {
  freePort,
  queryUrl,
  ServiceProcess,
  startRealtimeProcess,
  startRealtimeStack,
  tmpDir,
  waitFor,
} from './cluster.js';

const COMPLETED = 'conversation.item.input_audio_transcription.completed';

describe('faults: the realtime process killed during active streaming', function () {
  this.timeout(180_000);
  let db: TestDatabase;
  let api: { proc: ServiceProcess; url: string };
  let rt: ServiceProcess;
  let key: string;
  let wsUrl: string;
  const dataDir = tmpDir('stt-faults-rt-kill-');
  // Short leases: a killed session's row lapses within seconds (default 15 s lease, 2 s checkpoints; here 3 s and 1 s).
  const ledgerEnv = { REALTIME_LEASE_TTL_MS: '3000' };
  let rtEnv: Record<string, string>;

  const startRealtime = async () => {
    ({ proc: rt, wsUrl } = await startRealtimeProcess(rtEnv));
  };

  before(async () => {
    db = await createTestDatabase('stt_faults');
    // On a port of its own, the same after the restart: the clients reconnect to the URL they know.
    rtEnv = {
      DATABASE_URL: db.url,
      DATA_DIR: dataDir,
      REALTIME_PORT: String(await freePort()),
      ...ledgerEnv,
    };
    let realtime;
    ({ api, rt: realtime, key } = await startRealtimeStack(rtEnv));
    ({ proc: rt, wsUrl } = realtime);
  });

  // A failed case shows how the realtime process saw it: its warnings, its session ends (uWS's reason for a 1006) and whether it still runs.
  afterEach(function () {
    if (this.currentTest?.state !== 'failed' || !rt) return;
    const lines = rt.logLines().filter((l) => Number(l.level) >= 40 || l.msg === 'realtime session ended');
    const exit = rt.alive ? 'running' : `exited ${rt.child.exitCode ?? rt.child.signalCode}`;
    console.error(
      `realtime process (${exit}):\n${lines.map((l) => JSON.stringify(l)).join('\n')}\n${rt.output.slice(-2000)}`,
    );
  });

  after(async () => {
    await rt?.stop();
    await api?.proc.stop();
    await db?.drop();
    fs.rmSync(dataDir, { recursive: true, force: true });
  });

  const open = async (): Promise<Client> => {
    const c = await connect(wsUrl, { headers: { authorization: `Bearer ${key}` } });
    await c.next('session.created');
    return c;
  };

  const billed = () =>
    queryUrl<{ ref_id: string; n: string; status: string; seconds: number }>(
      db.url,
      `SELECT ref_id, count(*) AS n, max(status) AS status, max(audio_seconds) AS seconds
         FROM usage_events WHERE plane = 'realtime' GROUP BY ref_id`,
    );

  it('clients see the close, reconnect after the restart, and every session is billed once', async () => {
    const speech = Buffer.concat([readPcm('jfk.wav'), silence(1000)]);
    const first = await Promise.all([open(), open(), open()]);
    const killedIds = first.map((c) => c.events[0].session_id as string);
    const streams = first.map((c) => c.stream(speech, { pace: 1 }));
    // Killed once every session has a checkpoint: streaming, some seconds billed live.
    await waitFor(
      'a live checkpoint of every session',
      async () => {
        const rows = await billed();
        return killedIds.every((id) => rows.some((r) => r.ref_id === id && r.seconds > 0));
      },
      30_000,
      200,
    );
    rt.child.kill('SIGKILL');
    const closes = await Promise.all(first.map((c) => c.closed));
    for (const { code } of closes) expect(code, 'an abnormal close (no close frame)').to.equal(1006);
    await Promise.all(streams);

    await startRealtime();
    const second = await Promise.all([open(), open()]);
    const newIds = second.map((c) => c.events[0].session_id as string);
    await Promise.all(second.map((c) => c.stream(speech, { pace: 4 })));
    await Promise.all(second.map((c) => c.next(COMPLETED, 60_000)));
    for (const c of second) c.ws.close(1000);
    await Promise.all(second.map((c) => c.closed));

    const rows = await waitFor(
      'the killed sessions lapsed and the new ones final',
      async () => {
        const r = await billed();
        const done = (id: string, status: string) => r.some((x) => x.ref_id === id && x.status === status);
        return killedIds.every((id) => done(id, 'lapsed')) && newIds.every((id) => done(id, 'final'))
          ? r
          : undefined;
      },
      60_000,
      300,
    );
    for (const id of [...killedIds, ...newIds]) {
      const row = rows.find((r) => r.ref_id === id)!;
      expect(row.n, id).to.equal('1');
      expect(row.seconds, id).to.be.greaterThan(0);
    }
    expect(rows.filter((r) => !killedIds.includes(r.ref_id) && !newIds.includes(r.ref_id))).to.deep.equal([]);
    expect(api.proc.alive, 'the API process is up').to.equal(true);
    expect(rt.alive, 'the restarted realtime process is up').to.equal(true);
  });
});
