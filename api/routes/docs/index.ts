import type Router from '@koa/router';
import { koaSwagger } from 'koa2-swagger-ui';
import type { AppDeps } from '../../deps.js';

export function register(router: Router, deps: AppDeps): void {
  let cached: string | undefined;
  router.get('/openapi.json', (ctx) => {
    // Built on first request, after every route module has registered its operations.
    cached ??= JSON.stringify(deps.openapi.document());
    ctx.type = 'application/json';
    ctx.body = cached;
  });
  router.get(
    '/docs',
    koaSwagger({
      routePrefix: false,
      title: 'Audio Transcription Service',
      swaggerOptions: { url: '/openapi.json' },
    }),
  );
}
