/**
 * A clip's turn among its key's clips (api/routes/segment/turn.ts): the 503 it gets says how long
 * it waited. A clip behind its own key's clips waits longer than the server's queue limit (a
 * new-user trial saw "within 10000 ms" after 120 s of waiting).
 */
import { expect } from 'chai';
import { inTurn } from '../../api/routes/segment/turn.js';
import { FairShare } from '../../shared/fairShare.js';
import { HttpRefusal } from '../../shared/http/refusal.js';

describe('segment clip turn', () => {
  it('a clip waiting behind its own key says how long it waited, not the queue limit', async () => {
    // Two slots, one per key: the key's second clip waits behind its first while a slot stays free.
    const share = new FairShare(2, 1, false);
    const waits = { queueMs: 100, ownLineMs: 1200 };
    let release!: () => void;
    const first = inTurn(
      share,
      'k',
      new AbortController().signal,
      () => new Promise<void>((r) => (release = r)),
      waits,
    );
    const t0 = Date.now();
    const err = await inTurn(share, 'k', new AbortController().signal, async () => 'ran', waits).catch(
      (e: unknown) => e,
    );
    release();
    await first;
    expect(err).to.be.instanceOf(HttpRefusal);
    const refusal = err as HttpRefusal;
    expect(refusal.status).to.equal(503);
    expect(refusal.code).to.equal('engine_overloaded');
    expect(Date.now() - t0).to.be.at.least(1200);
    expect(refusal.message).to.match(/within 1 s /);
  });
});
