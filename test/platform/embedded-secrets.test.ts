import { expect } from 'chai';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Worker } from 'node:worker_threads';
import { loadOrCreateSecrets, markAnnounced } from '../../scripts/embedded/secrets.js';

describe('embedded start: secrets.json', () => {
  let dir: string;
  beforeEach(() => (dir = fs.mkdtempSync(path.join(os.tmpdir(), 'stt-secrets-'))));
  afterEach(() => fs.rmSync(dir, { recursive: true, force: true }));

  it('is created once with mode 0600 and read back unchanged', () => {
    const first = loadOrCreateSecrets(dir);
    expect(first.created).to.equal(true);
    expect(fs.statSync(path.join(dir, 'secrets.json')).mode & 0o777).to.equal(0o600);
    const again = loadOrCreateSecrets(dir);
    expect(again).to.deep.equal({ secrets: first.secrets, created: false });
  });

  it('is never seen empty or half written while it is rewritten (a reader in another thread)', async () => {
    const { secrets } = loadOrCreateSecrets(dir);
    const file = path.join(dir, 'secrets.json');
    // Reads as fast as it can until told to stop; counts what did not parse.
    const reader = new Worker(
      `const { parentPort, workerData } = require('node:worker_threads');
       const fs = require('node:fs');
       let stop = false, reads = 0, broken = 0;
       parentPort.on('message', () => (stop = true));
       (function loop() {
         for (let i = 0; i < 200; i++) {
           reads++;
           try { JSON.parse(fs.readFileSync(workerData, 'utf8')); } catch { broken++; }
         }
         if (stop) parentPort.postMessage({ reads, broken }); else setImmediate(loop);
       })();`,
      { eval: true, workerData: file },
    );
    const deadline = Date.now() + 1500;
    let writes = 0;
    while (Date.now() < deadline) {
      markAnnounced(dir, secrets);
      writes++;
      if (writes % 50 === 0) await new Promise((r) => setImmediate(r));
    }
    reader.postMessage('stop');
    const { reads, broken } = await new Promise<{ reads: number; broken: number }>((r) =>
      reader.once('message', r),
    );
    await reader.terminate();
    expect(reads).to.be.above(100);
    expect(broken, `${broken} of ${reads} reads during ${writes} writes`).to.equal(0);
    expect(JSON.parse(fs.readFileSync(file, 'utf8'))).to.deep.equal({ ...secrets, announced: true });
    expect(fs.readdirSync(dir)).to.deep.equal(['secrets.json']);
  });
});
