/**
 * Faults: the suite's own Postgres is stopped while realtime sessions
 * (a real realtime/main.ts process) close, and started again a few seconds
 * 25 s later (longer than the old meter's 21 s of retries: the usage
 * ledger spools what it cannot write). Invariants: the realtime process
 * stays up and serves new sessions, and every session is billed exactly once.
 */
import fs from 'node:fs';
import { expect } from 'chai';
import { connect, readPcm, silence, type Client } from '../realtime/helpers.js';
import { OwnPostgres, ServiceProcess, sleep, startRealtimeStack, tmpDir, waitFor } from './cluster.js';

describe('faults: Postgres stopped while realtime sessions close', function () {
  this.timeout(240_000);
  let pg: OwnPostgres;
  let api: { proc: ServiceProcess; url: string };
  let rt: ServiceProcess;
  let wsUrl: string;
  let key: string;
  const dataDir = tmpDir('stt-faults-rt-');

  before(async () => {
    pg = await OwnPostgres.start();
    // The API migrates the database and issues the key; the realtime process serves the stream.
    let realtime;
    ({ api, rt: realtime, key } = await startRealtimeStack({ DATABASE_URL: pg.url, DATA_DIR: dataDir }));
    ({ proc: rt, wsUrl } = realtime);
  });

  after(async () => {
    await rt?.stop();
    await api?.proc.stop();
    await pg?.destroy();
    fs.rmSync(dataDir, { recursive: true, force: true });
  });

  it('sessions closing during a 25 s outage are each billed exactly once; the process keeps serving', async () => {
    const speech = Buffer.concat([readPcm('librivox-austen-0880.wav'), silence(1000)]);
    const clients: Client[] = [];
    for (let i = 0; i < 3; i++) {
      const c = await connect(wsUrl, { headers: { authorization: `Bearer ${key}` } });
      await c.next('session.created');
      clients.push(c);
    }
    const ids = clients.map((c) => c.events[0].session_id as string);
    await Promise.all(clients.map((c) => c.stream(speech, { pace: 4 })));
    await pg.stop();
    for (const c of clients) c.ws.close(1000);
    await Promise.all(clients.map((c) => c.closed));
    await sleep(25_000);
    await pg.start();

    const rows = await waitFor(
      'every session billed',
      async () => {
        const r = await pg.query<{ ref_id: string; n: string }>(
          "SELECT ref_id, count(*) AS n FROM usage_events WHERE plane = 'realtime' GROUP BY ref_id",
        );
        return ids.every((id) => r.some((x) => x.ref_id === id)) ? r : undefined;
      },
      90_000,
      500,
    );
    for (const id of ids) expect(rows.find((r) => r.ref_id === id)?.n, id).to.equal('1');
    expect(rt.alive, 'the realtime process is up').to.equal(true);
    const again = await connect(wsUrl, { headers: { authorization: `Bearer ${key}` } });
    await again.next('session.created');
    again.ws.close(1000);
    await again.closed;
  });
});
