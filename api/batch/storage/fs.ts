/** Filesystem driver: one file per key under a root directory, written atomically. */
import { randomBytes } from 'node:crypto';
import { promises as fsp } from 'node:fs';
import path from 'node:path';
import { type ArtifactStore, assertSafeKey, InvalidKeyError } from './types.js';

const NOT_FOUND_CODES = new Set(['ENOENT', 'EISDIR', 'ENOTDIR', 'ENAMETOOLONG']);

export class FsArtifactStore implements ArtifactStore {
  readonly kind = 'fs' as const;
  private readonly root: string;

  constructor(
    root: string,
    private readonly prefix = '',
  ) {
    this.root = path.resolve(root);
  }

  private file(key: string, opts?: { allowTrailingSlash?: boolean }): string {
    assertSafeKey(this.prefix + key, opts);
    const full = path.resolve(this.root, this.prefix + key);
    // Belt and braces: the resolved path must stay below the root.
    if (full !== this.root && !full.startsWith(this.root + path.sep))
      throw new InvalidKeyError('Key escapes the store.');
    return full;
  }

  async init(): Promise<void> {
    await fsp.mkdir(this.root, { recursive: true });
  }

  async putJson(key: string, value: unknown): Promise<void> {
    const file = this.file(key);
    await fsp.mkdir(path.dirname(file), { recursive: true });
    const tmp = `${file}.${randomBytes(6).toString('hex')}.tmp`;
    try {
      const handle = await fsp.open(tmp, 'w');
      try {
        await handle.writeFile(JSON.stringify(value));
        await handle.sync();
      } finally {
        await handle.close();
      }
      await fsp.rename(tmp, file);
    } catch (err) {
      // A failed write (a full disk) leaves nothing behind: no temp file, no partial artifact.
      await fsp.rm(tmp, { force: true }).catch(() => {});
      throw err;
    }
  }

  async getJson<T>(key: string): Promise<T | null> {
    try {
      return JSON.parse(await fsp.readFile(this.file(key), 'utf8')) as T;
    } catch (err) {
      // Keys the filesystem cannot hold are missing too: a name over its length limit, a path through a file.
      if (NOT_FOUND_CODES.has((err as NodeJS.ErrnoException).code ?? '')) return null;
      throw err;
    }
  }

  async exists(key: string): Promise<boolean> {
    try {
      return (await fsp.stat(this.file(key))).isFile();
    } catch {
      return false;
    }
  }

  async list(prefix: string): Promise<string[]> {
    const dir = prefix.endsWith('/') ? prefix : prefix.slice(0, prefix.lastIndexOf('/') + 1);
    const base = dir
      ? this.file(dir, { allowTrailingSlash: true })
      : path.resolve(this.root, this.prefix || '.');
    const out: string[] = [];
    const walk = async (d: string, rel: string): Promise<void> => {
      let entries;
      try {
        entries = await fsp.readdir(d, { withFileTypes: true });
      } catch {
        return;
      }
      for (const e of entries) {
        const r = rel + e.name;
        if (e.isDirectory()) await walk(path.join(d, e.name), `${r}/`);
        else if (!e.name.endsWith('.tmp') && r.startsWith(prefix)) out.push(r);
      }
    };
    await walk(base, dir);
    return out.sort();
  }

  async delete(key: string): Promise<void> {
    await fsp.rm(this.file(key), { force: true });
  }

  async close(): Promise<void> {}
}
