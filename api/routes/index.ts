/**
 * Every resource of the REST API, one folder each; each module returns its
 * routes (api/http/routes.ts), and /openapi.json is built from the same list.
 * Registration order does not change behaviour: each method and path has one
 * route, and the poll aliases (`GET /{workflowId}`, `GET
 * /v1/audio/transcriptions/{workflowId}`) pass every path that is not a
 * workflow id on. The order below is the order of /openapi.json.
 */
import type { AppDeps } from '../deps.js';
import { operations, type Route } from '../http/routes.js';
import { openApiDocument } from '../openapi/registry.js';
import * as health from './health/index.js';
import * as docs from './docs/index.js';
import * as playground from './playground/index.js';
import * as metrics from './metrics/index.js';
import * as admin from './admin/index.js';
import * as usage from './usage/index.js';
import * as tokens from './tokens/index.js';
import * as segment from './segment/index.js';
import * as artifacts from './artifacts/index.js';
import * as jobs from './jobs/index.js';
import * as webhooks from './webhooks/index.js';
import * as vocabulary from './vocabulary/index.js';
import * as openai from './openai/index.js';
import * as stream from './stream/index.js';

export function apiRoutes(deps: AppDeps): Route[] {
  const all: Route[] = [
    ...health.routes(deps),
    ...metrics.routes(deps),
    ...docs.routes(() => openApiDocument(operations(all))),
    ...playground.routes(deps),
    ...admin.routes(deps),
    ...usage.routes(deps),
    ...tokens.routes(deps),
    ...segment.routes(deps),
    ...stream.routes(),
    ...openai.routes(deps),
    ...artifacts.routes(deps),
    ...jobs.routes(deps),
    ...webhooks.routes(deps),
    ...vocabulary.routes(deps),
  ];
  return all;
}
