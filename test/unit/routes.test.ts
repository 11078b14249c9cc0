/** The route convention (api/http/routes.ts): one route per method and path, documented from the route itself. */
import Router from '@koa/router';
import { expect } from 'chai';
import { operations, openApiPath, registerRoutes, type Route } from '../../api/http/routes.js';

const doc = (operationId: string) => ({
  operationId,
  summary: operationId,
  tags: ['t'],
  security: 'none' as const,
  responses: { '200': { description: 'ok' } },
});
const handler: Route['chain'][number] = (ctx) => {
  ctx.body = 'ok';
};

describe('route convention', () => {
  it('refuses a second route for the same method and path', () => {
    const routes: Route[] = [
      { method: 'get', path: '/a/:id', chain: [handler] },
      { method: 'delete', path: '/a/:id', chain: [handler] },
      { method: 'get', path: '/a/:id', chain: [handler] },
    ];
    expect(() => registerRoutes(new Router(), routes)).to.throw(/two routes for GET \/a\/:id/);
  });

  it('documents each route with a doc under its OpenAPI path, an `all` route as its GET, RegExp routes never', () => {
    const ops = operations([
      { method: 'get', path: '/keys/:id/usage', chain: [handler], doc: doc('usage') },
      { method: 'all', path: '/stream', chain: [handler], doc: doc('stream') },
      { method: 'get', path: '/r2/{*key}', chain: [handler], doc: doc('artifact') },
      { method: 'all', path: /^\/v1\/chat/, chain: [handler], doc: doc('never') },
      { method: 'get', path: '/undocumented', chain: [handler] },
    ]);
    expect(ops.map((o) => [o.method, o.path, o.operationId])).to.deep.equal([
      ['get', '/keys/{id}/usage', 'usage'],
      ['get', '/stream', 'stream'],
      ['get', '/r2/{key}', 'artifact'],
    ]);
    expect(openApiPath('/v1/audio/transcriptions/jobs/:workflowId')).to.equal(
      '/v1/audio/transcriptions/jobs/{workflowId}',
    );
  });
});
