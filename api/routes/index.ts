/**
 * Every resource of the REST API, one folder each. Order matters only for
 * the catch-all poll alias `GET /{workflowId}`, which the jobs module
 * registers last.
 */
import type Router from '@koa/router';
import type { AppDeps } from '../deps.js';
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
import * as openai from './openai/index.js';
import * as stream from './stream/index.js';

export interface RouteModule {
  register(router: Router, deps: AppDeps): void;
}

// segment before jobs: a JSON body on POST /v1/audio/transcriptions falls through to the deprecated job submission.
export const routeModules: RouteModule[] = [
  health,
  metrics,
  docs,
  playground,
  admin,
  usage,
  tokens,
  segment,
  stream,
  openai,
  artifacts,
  jobs,
];
