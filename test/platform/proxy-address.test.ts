/**
 * The client address behind proxies (issue 36). With TRUST_PROXY the API
 * took the first (client-supplied) X-Forwarded-For entry: a wrong admin
 * token with a new X-Forwarded-For each time was never throttled, and
 * wrong tokens sent under someone else's address locked that address out.
 * HAProxy appends the address it saw; TRUST_PROXY is now a hop count and
 * the address is the entry that many hops from the right.
 */
import { expect } from 'chai';
import request from 'supertest';
import { ADMIN_TOKEN, createTestApp, type TestApp } from '../helpers/app.js';

const KEYS = '/v1/external-transcription/keys';
const ATTACKER = '203.0.113.9';
const VICTIM = '198.51.100.7';

describe('client address behind a proxy (TRUST_PROXY hops)', () => {
  for (const trust of ['true', '1']) {
    describe(`TRUST_PROXY=${trust}`, () => {
      let t: TestApp;
      before(async () => {
        t = await createTestApp({ TRUST_PROXY: trust, ADMIN_AUTH_FAILURES_PER_MINUTE: '5' });
      });
      after(() => t.close());

      /** A request as HAProxy forwards it: whatever the client sent, then the address HAProxy saw. */
      const via = (from: string, sent?: string) =>
        request(t.server)
          .get(KEYS)
          .set('X-Forwarded-For', sent ? `${sent}, ${from}` : from);

      it('a new made-up X-Forwarded-For on each wrong token does not escape the throttle', async () => {
        const answers: number[] = [];
        for (let i = 0; i < 12; i++)
          answers.push(
            (await via(ATTACKER, `10.1.${i}.${i}`).set('Authorization', `Bearer wrong-${i}`)).status,
          );
        expect(answers.slice(0, 5)).to.deep.equal([401, 401, 401, 401, 401]);
        expect(answers.slice(5)).to.deep.equal(Array(7).fill(429));
      });

      it("wrong tokens sent under someone else's address do not lock that address out", async () => {
        for (let i = 0; i < 8; i++) await via('192.0.2.44', VICTIM).set('Authorization', `Bearer wrong-${i}`);
        const victim = await via(VICTIM).set('Authorization', `Bearer ${ADMIN_TOKEN}`);
        expect(victim.status, victim.text).to.equal(200);
      });
    });
  }

  it('two proxies (TRUST_PROXY=2): the address is the entry two hops from the right', async () => {
    const t = await createTestApp({ TRUST_PROXY: '2', ADMIN_AUTH_FAILURES_PER_MINUTE: '2' });
    try {
      const send = (spoof: string) =>
        request(t.server)
          .get(KEYS)
          .set('X-Forwarded-For', `${spoof}, ${ATTACKER}, 10.0.0.2`)
          .set('Authorization', 'Bearer wrong');
      expect((await send('1.1.1.1')).status).to.equal(401);
      expect((await send('2.2.2.2')).status).to.equal(401);
      expect((await send('3.3.3.3')).status).to.equal(429);
    } finally {
      await t.close();
    }
  });
});
