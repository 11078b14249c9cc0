/**
 * The OpenAPI 3.1 document is assembled from the routes themselves: each
 * route carries its operation (api/http/routes.ts), described with the very
 * schema objects it validates requests with, so /openapi.json cannot drift
 * from behaviour.
 */
import { jobAcceptedSchema, jobRequestSchema, workflowStatusSchema } from '../batch/schemas.js';
import { batchErrorSchema } from './schemas.js';

export type Security = 'apiKey' | 'admin' | 'none';

export interface ResponseSpec {
  description: string;
  schema?: object;
  contentType?: string;
  headers?: Record<string, { description: string; schema: object }>;
}

export interface OperationSpec {
  method: 'get' | 'post' | 'put' | 'patch' | 'delete';
  /** OpenAPI style path, e.g. /v1/external-transcription/keys/{id}. */
  path: string;
  operationId: string;
  summary: string;
  description?: string;
  tags: string[];
  security: Security;
  deprecated?: boolean;
  parameters?: object[];
  requestBody?: { contentType: string; schema: object; required?: boolean; description?: string }[];
  responses: Record<string, ResponseSpec>;
}

export const API_VERSION = '0.1.0';

/** The named component schemas, in the order the document lists them. */
const COMPONENTS = {
  TranscriptionJobRequest: jobRequestSchema,
  TranscriptionJobAccepted: jobAcceptedSchema,
  WorkflowStatus: workflowStatusSchema,
  BatchError: batchErrorSchema,
} as const;

/** A reference to a named component schema. */
export function componentRef(name: keyof typeof COMPONENTS): { $ref: string } {
  return { $ref: `#/components/schemas/${name}` };
}

/** The OpenAPI document of these operations, in their order. */
export function openApiDocument(ops: readonly OperationSpec[]): Record<string, unknown> {
  const paths: Record<string, Record<string, unknown>> = {};
  for (const op of ops) {
    const item = (paths[op.path] ??= {});
    const responses: Record<string, unknown> = {};
    for (const [status, r] of Object.entries(op.responses)) {
      responses[status] = {
        description: r.description,
        ...(r.headers ? { headers: r.headers } : {}),
        ...(r.schema ? { content: { [r.contentType ?? 'application/json']: { schema: r.schema } } } : {}),
      };
    }
    item[op.method] = {
      operationId: op.operationId,
      summary: op.summary,
      ...(op.description ? { description: op.description } : {}),
      tags: op.tags,
      ...(op.deprecated ? { deprecated: true } : {}),
      security: op.security === 'none' ? [] : [{ [op.security === 'admin' ? 'adminToken' : 'apiKey']: [] }],
      ...(op.parameters ? { parameters: op.parameters } : {}),
      ...(op.requestBody
        ? {
            requestBody: {
              required: op.requestBody.some((b) => b.required !== false),
              content: Object.fromEntries(op.requestBody.map((b) => [b.contentType, { schema: b.schema }])),
            },
          }
        : {}),
      responses,
    };
  }
  return {
    openapi: '3.1.0',
    info: {
      title: 'Audio Transcription Service',
      version: API_VERSION,
      description:
        'Speech to text: realtime WebSocket streaming (`wss://{host}/v1/audio/transcriptions/stream`), synchronous segment transcription, asynchronous batch jobs, session tokens and the operator admin API.',
    },
    servers: [{ url: '/' }],
    paths,
    components: {
      securitySchemes: {
        apiKey: { type: 'http', scheme: 'bearer', description: 'API key `sk-…` issued by the operator.' },
        adminToken: {
          type: 'http',
          scheme: 'bearer',
          description: 'Operator token (GATEWAY_ADMIN_TOKEN).',
        },
      },
      schemas: COMPONENTS,
    },
  };
}

/** Common parameter helper. */
export function pathParam(name: string, schema: object, description: string): object {
  return { name, in: 'path', required: true, description, schema };
}
