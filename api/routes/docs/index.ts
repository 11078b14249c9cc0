/**
 * GET /openapi.json (built from the registered routes) and GET /docs, the
 * interactive documentation (koa2-swagger-ui). The page's Swagger UI files
 * are served from the `swagger-ui-dist` package under /docs/assets rather
 * than a CDN, so /docs works on a machine without internet access and sends
 * a visitor's browser nowhere else.
 */
import fs from 'node:fs';
import { createRequire } from 'node:module';
import { createHash } from 'node:crypto';
import path from 'node:path';
import { koaSwagger } from 'koa2-swagger-ui';
import { ApiError } from '../../http/errors.js';
import type { Route } from '../../http/routes.js';

const DIST = path.dirname(createRequire(import.meta.url).resolve('swagger-ui-dist/package.json'));

/** The files the page asks for (name in the page -> file in swagger-ui-dist). */
const ASSETS: Record<string, { file: string; type: string }> = {
  'swagger-ui.min.css': { file: 'swagger-ui.css', type: 'text/css; charset=utf-8' },
  'swagger-ui-bundle.js': { file: 'swagger-ui-bundle.js', type: 'application/javascript; charset=utf-8' },
  'swagger-ui-standalone-preset.js': {
    file: 'swagger-ui-standalone-preset.js',
    type: 'application/javascript; charset=utf-8',
  },
  'favicon-32x32.png': { file: 'favicon-32x32.png', type: 'image/png' },
};

/**
 * The page's policy: its own assets only, its inline start-up script by
 * hash, never framed. Swagger UI sets inline styles, and renders data: images.
 */
function docsPolicy(html: string): string {
  const hashes = [...html.matchAll(/<script(?![^>]*\bsrc=)[^>]*>([\s\S]*?)<\/script>/g)].map(
    (m) => `'sha256-${createHash('sha256').update(m[1]).digest('base64')}'`,
  );
  return [
    "default-src 'self'",
    `script-src 'self' ${hashes.join(' ')}`.trim(),
    "style-src 'self' 'unsafe-inline'",
    "img-src 'self' data:",
    "connect-src 'self'",
    "object-src 'none'",
    "base-uri 'none'",
    "frame-ancestors 'none'",
    "form-action 'self'",
  ].join('; ');
}

/** The documentation routes; `document` gives the OpenAPI document of every route (asked on first use). */
export function routes(document: () => object): Route[] {
  let cached: string | undefined;
  const page = koaSwagger({
    routePrefix: false,
    title: 'Audio Transcription Service',
    swaggerOptions: { url: '/openapi.json' },
    // The page links `${swaggerCdnUrl}/${swaggerVersion}/<file>`: here, /docs/assets/<file>.
    swaggerCdnUrl: '/docs',
    swaggerVersion: 'assets',
    favicon: '/docs/assets/favicon-32x32.png',
  });
  return [
    {
      method: 'get',
      path: '/openapi.json',
      chain: [
        (ctx) => {
          cached ??= JSON.stringify(document());
          ctx.type = 'application/json';
          ctx.body = cached;
        },
      ],
    },
    {
      method: 'get',
      path: '/docs',
      chain: [
        async (ctx, next) => {
          await page(ctx, next);
          // Web fonts are the page's one remaining outside request; the system fonts do.
          if (typeof ctx.body === 'string') {
            const html = ctx.body.replace(/<link href="https:\/\/fonts\.googleapis\.com[^>]*>\s*/, '');
            ctx.body = html;
            // Issue 41: no policy let the page be framed (clickjacking "Try it out" with a key in it).
            ctx.set('Content-Security-Policy', docsPolicy(html));
            ctx.set('X-Frame-Options', 'DENY');
            ctx.set('X-Content-Type-Options', 'nosniff');
            ctx.set('Referrer-Policy', 'no-referrer');
          }
        },
      ],
    },
    {
      method: 'get',
      path: '/docs/assets/:name',
      chain: [
        (ctx) => {
          // Own names only: `constructor`, `__proto__` and `toString` are not assets.
          const name = ctx.params.name;
          if (!Object.hasOwn(ASSETS, name))
            throw new ApiError(404, 'not_found', 'Unknown documentation asset.');
          const asset = ASSETS[name];
          ctx.type = asset.type;
          ctx.set('Cache-Control', 'public, max-age=86400');
          ctx.body = fs.createReadStream(path.join(DIST, asset.file));
        },
      ],
    },
  ];
}
