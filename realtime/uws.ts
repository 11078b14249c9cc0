/**
 * Loads uWebSockets.js and proves it is the native addon. The package we use
 * (@trufflesuite/uws-js-unofficial) silently falls back to a pure-JS shim over
 * `ws` when its binary does not load for this Node ABI (or when
 * UWS_USE_FALLBACK is set); that shim is an order of magnitude slower and
 * lacks the backpressure semantics we rely on, so the realtime tier refuses to
 * start on it.
 */
import { createRequire } from 'node:module';
import type * as UWS from 'uWebSockets.js';

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
      file.endsWith('.node') && /uWebSockets\.js|uws-js-unofficial/.test(file) && rec?.exports === mod,
  );
  const appSource = Function.prototype.toString.call((mod as { App: unknown }).App);
  return native && appSource.includes('[native code]');
}

let loaded: Uws | undefined;

export function loadUws(opts: { requireNative: boolean } = { requireNative: true }): Uws {
  if (loaded) return loaded;
  const mod = require('uWebSockets.js') as Uws;
  if (opts.requireNative && !isNativeUws(mod, require.cache)) {
    throw new NativeUwsUnavailable(
      'uWebSockets.js loaded its pure-JS fallback instead of the native addon ' +
        `(node ${process.version}, ABI ${process.versions.modules}, ${process.platform}-${process.arch}); ` +
        'the realtime tier refuses to run on it. Use a Node version the package ships a binary for.',
    );
  }
  loaded = mod;
  return mod;
}
