/** Artifact store contract on both drivers: filesystem and S3 (s3rver on loopback). */
import fs from 'node:fs';
import net from 'node:net';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { expect } from 'chai';
import S3rver from 's3rver';
import {
  type ArtifactStore,
  FsArtifactStore,
  InvalidKeyError,
  S3ArtifactStore,
  assertSafeKey,
  tenantStore,
} from '../../api/batch/storage/index.js';
import request from 'supertest';
import { audioDir, createBatchTestApp, issueKey, startFileServer, tmpDir, waitFor } from './helpers.js';

export async function startS3(): Promise<{ endpoint: string; close(): Promise<void> }> {
  const dir = tmpDir('s3rver-');
  const server = new S3rver({ address: '127.0.0.1', port: 0, silent: true, directory: dir });
  const addr = (await server.run()) as AddressInfo;
  return {
    endpoint: `http://127.0.0.1:${addr.port}`,
    async close() {
      await server.close();
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}

function contract(name: string, make: () => Promise<{ store: ArtifactStore; cleanup(): Promise<void> }>) {
  describe(`storage: ${name} driver`, function () {
    this.timeout(20_000);
    let store: ArtifactStore;
    let cleanup: () => Promise<void>;
    before(async () => {
      ({ store, cleanup } = await make());
      await store.init();
      await store.init(); // idempotent
    });
    after(async () => {
      await store?.close();
      await cleanup?.();
    });

    it('puts, gets, checks and lists JSON by key', async () => {
      await store.putJson('transcription/r1/chunk_0.json', { a: 1 });
      await store.putJson('transcription/r1/chunk_1.json', { a: 2 });
      await store.putJson('transcription/r2/result.json', { b: [1, 2] });
      expect(await store.getJson('transcription/r1/chunk_1.json')).to.deep.equal({ a: 2 });
      expect(await store.getJson('transcription/r1/missing.json')).to.equal(null);
      expect(await store.exists('transcription/r2/result.json')).to.equal(true);
      expect(await store.exists('transcription/r2/nope.json')).to.equal(false);
      expect(await store.list('transcription/r1/')).to.deep.equal([
        'transcription/r1/chunk_0.json',
        'transcription/r1/chunk_1.json',
      ]);
      await store.putJson('transcription/r1/chunk_0.json', { a: 3 });
      expect(await store.getJson('transcription/r1/chunk_0.json')).to.deep.equal({ a: 3 });
      await store.delete('transcription/r1/chunk_0.json');
      expect(await store.exists('transcription/r1/chunk_0.json')).to.equal(false);
    });

    it('refuses keys that could escape their prefix', async () => {
      for (const k of [
        '../x.json',
        '/abs.json',
        'a/../../x.json',
        'a//b.json',
        'a\\b.json',
        'a/%2e%2e/b.json',
        'a/./b.json',
        '',
        'a/b\u0000.json',
      ]) {
        let err: unknown;
        try {
          await store.putJson(k, {});
        } catch (e) {
          err = e;
        }
        expect(err, JSON.stringify(k)).to.be.instanceOf(InvalidKeyError);
      }
    });

    it('keeps tenants apart', async () => {
      const a = tenantStore(store, 'tenant-a');
      const b = tenantStore(store, 'tenant-b');
      await a.putJson('transcription/same/result.json', { owner: 'a' });
      expect(await b.getJson('transcription/same/result.json')).to.equal(null);
      expect(await a.getJson('transcription/same/result.json')).to.deep.equal({ owner: 'a' });
      expect(await a.list('transcription/same/')).to.deep.equal(['transcription/same/result.json']);
    });
  });
}

contract('filesystem', async () => {
  const dir = tmpDir('fs-store-');
  return {
    store: new FsArtifactStore(dir),
    cleanup: async () => fs.rmSync(dir, { recursive: true, force: true }),
  };
});

const s3Config = {
  endpoint: undefined as string | undefined,
  region: 'us-east-1',
  bucket: 'artifacts',
  accessKeyId: 'S3RVER',
  secretAccessKey: 'S3RVER',
  forcePathStyle: true,
  connectTimeoutMs: 5_000,
  requestTimeoutMs: 30_000,
};

contract('S3 (s3rver)', async () => {
  const s3 = await startS3();
  const store = new S3ArtifactStore({ ...s3Config, endpoint: s3.endpoint }, 'prefix/');
  return { store, cleanup: () => s3.close() };
});

describe('storage: instances starting together on an S3 store', () => {
  it('all initialise when they race to create the bucket (BucketAlreadyExists is success)', async () => {
    const s3 = await startS3();
    try {
      const bucket = `race-${Date.now().toString(36)}`;
      const stores = Array.from(
        { length: 5 },
        () => new S3ArtifactStore({ ...s3Config, bucket, endpoint: s3.endpoint }),
      );
      const results = await Promise.allSettled(stores.map((s) => s.init()));
      expect(results.map((r) => r.status)).to.deep.equal(Array(5).fill('fulfilled'));
      await stores[0].putJson('k.json', { ok: true });
      expect(await stores[4].getJson('k.json')).to.deep.equal({ ok: true });
    } finally {
      await s3.close();
    }
  });
});

describe('storage: an S3 endpoint that never answers', () => {
  it('fails the request after its request timeout instead of hanging the workflow', async () => {
    // Accepts connections, reads the request, never answers.
    const sockets = new Set<net.Socket>();
    const mute = net.createServer((s) => {
      sockets.add(s);
      s.on('data', () => {});
    });
    await new Promise<void>((r) => mute.listen(0, '127.0.0.1', r));
    const endpoint = `http://127.0.0.1:${(mute.address() as net.AddressInfo).port}`;
    const store = new S3ArtifactStore({ ...s3Config, endpoint, requestTimeoutMs: 300 });
    const started = Date.now();
    try {
      const err = await store.putJson('transcription/x/chunk_0.json', {}).catch((e: unknown) => e);
      expect(err).to.be.instanceOf(Error);
      // The SDK retries (3 attempts by default); each gives up after 300 ms.
      expect(Date.now() - started).to.be.below(5_000);
    } finally {
      for (const s of sockets) s.destroy();
      await new Promise((r) => mute.close(r));
    }
  });
});

describe('storage: key validation', () => {
  it('accepts ordinary keys and rejects traversal', () => {
    expect(assertSafeKey('transcription/abc-1/chunk_0.json')).to.equal('transcription/abc-1/chunk_0.json');
    expect(() => assertSafeKey('transcription/../../etc/passwd')).to.throw(InvalidKeyError);
  });
  it('the filesystem driver never writes outside its root', async () => {
    const dir = tmpDir('fs-root-');
    const store = new FsArtifactStore(path.join(dir, 'root'));
    await store.init();
    await store.putJson('a/b.json', {});
    expect(fs.existsSync(path.join(dir, 'root', 'a', 'b.json'))).to.equal(true);
    fs.rmSync(dir, { recursive: true, force: true });
  });
});

describe('storage: a batch job on the S3 driver', function () {
  this.timeout(60_000);
  it('checkpoints and results land in the bucket and are served by GET /r2', async () => {
    const s3 = await startS3();
    const dir = tmpDir('s3-job-');
    fs.copyFileSync(path.join(audioDir, 'librivox-austen-0880.wav'), path.join(dir, 'a.wav'));
    const files = await startFileServer(dir);
    const t = await createBatchTestApp(
      {
        ARTIFACT_STORE: 's3',
        S3_ENDPOINT: s3.endpoint,
        S3_BUCKET: 'batch-artifacts',
        S3_ACCESS_KEY_ID: 'S3RVER',
        S3_SECRET_ACCESS_KEY: 'S3RVER',
      },
      { start: true },
    );
    try {
      expect(t.runtime.store.kind).to.equal('s3');
      const key = (await issueKey(t, { ownerId: 'tenant-s3', plan: 'pro' })).key;
      const sub = await request(t.server)
        .post('/v1/audio/transcriptions/jobs')
        .set('authorization', `Bearer ${key}`)
        .send({ audio_url: `${files.url}/a.wav`, request_id: 's3-job-1' });
      const done = await waitFor(async () => {
        const r = await request(t.server)
          .get(`/${sub.body.workflow_id}`)
          .set('authorization', `Bearer ${key}`);
        return r.body.status === 'complete' || r.body.status === 'errored' ? r : undefined;
      });
      expect(done.body.status, JSON.stringify(done.body.error)).to.equal('complete');
      const listed = await tenantStore(t.runtime.store, 'tenant-s3').list('transcription/s3-job-1/');
      expect(listed).to.deep.equal([
        'transcription/s3-job-1/chunk_0.json',
        'transcription/s3-job-1/result.json',
      ]);
      const r = await request(t.server)
        .get('/r2/transcription/s3-job-1/result.json')
        .set('authorization', `Bearer ${key}`);
      expect(r.status).to.equal(200);
      expect(r.body).to.deep.equal(done.body.output.result);
    } finally {
      await t.close();
      await files.close();
      await s3.close();
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});
