/**
 * The read side of polls, the hottest request of the batch plane. The poll
 * response is kept ready-made on the workflow row (`poll_body`, rendered by
 * triggers, migration 20261121214500), so a poll is a primary-key read of one
 * text column, with the tenant in the same join condition, sent to the
 * client as it is.
 *
 * Polls that arrive in the same turn of the event loop are read together by
 * one prepared statement (an indexed join against the list of requested ids
 * and owners), on a few connections of their own in pg's pipeline mode, so
 * the next batch does not wait for the previous one's answer. Under load this
 * turns many round trips, writes and reads into one per batch; a single poll
 * waits only for the end of the current loop turn.
 */
import pg from 'pg';
import type { Logger } from 'pino';

const POLL_STATEMENT = {
  name: 'batch_poll_bodies',
  text: `SELECT q.i::int4, w.poll_body
           FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS q(id, owner_id, i)
           JOIN batch_workflows w ON w.id = q.id AND w.owner_id = q.owner_id`,
};
/** Most polls one statement reads. */
const MAX_BATCH = 256;

interface PendingPoll {
  workflowId: string;
  ownerId: string;
  resolve(body: string | undefined): void;
  reject(err: unknown): void;
}

export class PollReader {
  private readonly slots: (Promise<pg.Client> | undefined)[];
  private next = 0;
  private pending: PendingPoll[] = [];

  constructor(
    private readonly databaseUrl: string,
    connections: number,
    private readonly log: Logger,
    private readonly statementTimeoutMs = 5000,
  ) {
    this.slots = new Array(Math.max(1, connections)).fill(undefined);
  }

  /** The poll response of the tenant's workflow, or undefined (unknown id, or another tenant's). */
  body(workflowId: string, ownerId: string): Promise<string | undefined> {
    return new Promise((resolve, reject) => {
      if (this.pending.push({ workflowId, ownerId, resolve, reject }) === 1) setImmediate(this.flush);
    });
  }

  async close(): Promise<void> {
    const open = this.slots.splice(0, this.slots.length, ...this.slots.map(() => undefined));
    await Promise.all(open.map((c) => c?.then((client) => client.end()).catch(() => {})));
  }

  private readonly flush = () => {
    const all = this.pending;
    this.pending = [];
    for (let i = 0; i < all.length; i += MAX_BATCH) void this.read(all.slice(i, i + MAX_BATCH));
  };

  private async read(batch: PendingPoll[]): Promise<void> {
    try {
      const client = await this.client();
      const res = await client.query<[number, string | null]>({
        ...POLL_STATEMENT,
        values: [batch.map((p) => p.workflowId), batch.map((p) => p.ownerId)],
        rowMode: 'array',
      });
      const bodies: (string | undefined)[] = new Array(batch.length);
      for (const [i, body] of res.rows) bodies[i - 1] = body ?? undefined;
      for (let i = 0; i < batch.length; i++) batch[i].resolve(bodies[i]);
    } catch (err) {
      for (const p of batch) p.reject(err);
    }
  }

  private client(): Promise<pg.Client> {
    const i = this.next;
    this.next = (i + 1) % this.slots.length;
    return (this.slots[i] ??= this.connect(i));
  }

  private connect(i: number): Promise<pg.Client> {
    const client = new pg.Client({
      connectionString: this.databaseUrl,
      pipeline: true,
      statement_timeout: this.statementTimeoutMs,
      connectionTimeoutMillis: 5000,
      application_name: 'batch-polls',
    } as pg.ClientConfig);
    const connecting = client.connect().then(() => {
      // Never what keeps a process alive: the pools of the process decide that.
      (client as pg.Client & { unref(): void }).unref();
      return client;
    });
    const drop = () => {
      if (this.slots[i] === connecting) this.slots[i] = undefined;
    };
    client.on('error', (err) => {
      this.log.warn({ err }, 'poll connection failed; reconnecting on the next poll');
      drop();
    });
    client.on('end', drop);
    connecting.catch(drop);
    return connecting;
  }
}
