/**
 * Loads uWebSockets.js and proves it is the native addon. The package
 * (@btc-vision/uwebsockets.js, a build of uNetworking's releases) ships one
 * addon per platform and Node ABI and throws when none loads; older packagings
 * fell back to a pure-JS shim over `ws` instead, an order of magnitude slower
 * and without the backpressure semantics we rely on, so the realtime tier
 * checks that what it got is the addon and refuses to start otherwise. On
 * glibc older than 2.38 the addon is loaded through ./uwsGlibc.ts.
 */
import { createRequire } from 'node:module';
import path from 'node:path';
import type * as UWS from 'uWebSockets.js';
import { loadablePath, needsGlibcShim } from './uwsGlibc.js';

export type Uws = typeof UWS;

const require = createRequire(import.meta.url);

export class NativeUwsUnavailable extends Error {
  override name = 'NativeUwsUnavailable';
}

/**
 * True when `mod` is the native addon: its module record in the require cache
 * is a `.node` file of the package, and `App` is a native function. The shim's
 * exports come from the package's `dist/index.js` instead.
 */
export function isNativeUws(mod: unknown, cache: Record<string, { exports?: unknown } | undefined>): boolean {
  if (!mod || typeof (mod as { App?: unknown }).App !== 'function') return false;
  const native = Object.entries(cache).some(
    ([file, rec]) =>
      file.endsWith('.node') && /uWebSockets\.js|uwebsockets\.js|stt-uws-/.test(file) && rec?.exports === mod,
  );
  const appSource = Function.prototype.toString.call((mod as { App: unknown }).App);
  return native && appSource.includes('[native code]');
}

let loaded: Uws | undefined;

/** The package's addon for this platform and Node ABI (the file its main module requires). */
function addonPath(): string {
  const dir = path.dirname(require.resolve('uWebSockets.js'));
  return path.join(dir, `uws_${process.platform}_${process.arch}_${process.versions.modules}.node`);
}

export function loadUws(opts: { requireNative: boolean } = { requireNative: true }): Uws {
  if (loaded) return loaded;
  const where = `node ${process.version}, ABI ${process.versions.modules}, ${process.platform}-${process.arch}`;
  let mod: Uws;
  try {
    mod = (needsGlibcShim() ? require(loadablePath(addonPath())) : require('uWebSockets.js')) as Uws;
  } catch (err) {
    throw new NativeUwsUnavailable(
      `uWebSockets.js has no native addon that loads here (${where}): ${(err as Error).message.split('\n')[0]}. ` +
        'The realtime tier needs it; use a Node version the package ships a binary for (package.json "engines").',
    );
  }
  if (opts.requireNative && !isNativeUws(mod, require.cache)) {
    throw new NativeUwsUnavailable(
      `uWebSockets.js loaded something other than its native addon (${where}); the realtime tier refuses to run on it.`,
    );
  }
  loaded = mod;
  return mod;
}
