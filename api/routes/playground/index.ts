/**
 * GET / — the playground: plain HTML, CSS and JavaScript files served as they
 * are from ./static (no build step), under a Content-Security-Policy that
 * keeps the page on this origin: no third-party requests, no inline script.
 * The page takes an API key into memory, mints `rt_` session tokens for the
 * realtime socket, and uses the public endpoints like any other client.
 * PLAYGROUND_ENABLED=false turns it off (GET / is then the JSON 404).
 */
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Context } from 'koa';
import type { AppDeps } from '../../deps.js';
import type { Route } from '../../http/routes.js';

const HERE = path.dirname(fileURLToPath(import.meta.url));
/** Beside this file when run from source; from the source tree when run compiled (dist/ holds no static files). */
const STATIC = [
  path.join(HERE, 'static'),
  path.resolve(HERE, '../../../../api/routes/playground/static'),
].find((dir) => fs.existsSync(dir))!;

const FILES: Record<string, { file: string; type: string }> = {
  '/': { file: 'index.html', type: 'text/html; charset=utf-8' },
  '/playground/app.js': { file: 'app.js', type: 'text/javascript; charset=utf-8' },
  '/playground/mic.js': { file: 'mic.js', type: 'text/javascript; charset=utf-8' },
  '/playground/pcm-worklet.js': { file: 'pcm-worklet.js', type: 'text/javascript; charset=utf-8' },
  '/playground/style.css': { file: 'style.css', type: 'text/css; charset=utf-8' },
};

export const PLAYGROUND_CSP = [
  "default-src 'self'",
  "connect-src 'self'",
  "img-src 'self' data:",
  "media-src 'self' blob:",
  "object-src 'none'",
  "base-uri 'none'",
  "frame-ancestors 'none'",
  "form-action 'self'",
].join('; ');

export function routes(deps: AppDeps): Route[] {
  if (!deps.config.playgroundEnabled) return [];
  // Small files, read once: the page is the same for every visitor.
  const cache = new Map(
    Object.entries(FILES).map(([p, f]) => [p, { ...f, body: fs.readFileSync(path.join(STATIC, f.file)) }]),
  );
  const serve = (ctx: Context) => {
    const asset = cache.get(ctx.path)!;
    ctx.set('Content-Security-Policy', PLAYGROUND_CSP);
    ctx.set('X-Content-Type-Options', 'nosniff');
    ctx.set('Referrer-Policy', 'no-referrer');
    ctx.set('Cache-Control', 'no-cache');
    ctx.type = asset.type;
    ctx.body = asset.body;
  };
  return [...cache.keys()].map((p) => ({ method: 'get', path: p, chain: [serve] }));
}
