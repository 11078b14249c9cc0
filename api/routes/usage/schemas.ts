/** Query and response schemas of the usage reports (validated with ajv, published in /openapi.json). */

export const usageQuery = {
  type: 'object',
  additionalProperties: false,
  properties: {
    from: {
      type: 'string',
      format: 'date',
      description: 'First UTC day (YYYY-MM-DD), inclusive; default 29 days before `to`.',
    },
    to: {
      type: 'string',
      format: 'date',
      description: 'Last UTC day (YYYY-MM-DD), inclusive; default today.',
    },
  },
} as const;

export interface UsageQuery {
  from?: string;
  to?: string;
}

const seconds = { type: 'number', minimum: 0 } as const;
const count = { type: 'integer', minimum: 0 } as const;

const figures = {
  audioSeconds: {
    type: 'object',
    required: ['segment', 'realtime', 'batch', 'total'],
    properties: { segment: seconds, realtime: seconds, batch: seconds, total: seconds },
    description: 'Billed audio seconds by plane',
  },
  requests: { ...count, description: 'Segment requests billed' },
  sessions: { ...count, description: 'Realtime sessions billed' },
  jobs: { ...count, description: 'Batch jobs billed' },
} as const;
const figureFields = ['audioSeconds', 'requests', 'sessions', 'jobs'];

export const usageWindowSchema = {
  type: 'object',
  required: ['seconds', 'usedAudioSeconds', 'maxAudioSecondsPerWindow', 'remainingAudioSeconds'],
  description: 'The rolling billing window (USAGE_WINDOW_SECONDS) ending now, against the plan',
  properties: {
    seconds: count,
    usedAudioSeconds: seconds,
    maxAudioSecondsPerWindow: count,
    remainingAudioSeconds: seconds,
  },
} as const;

export const keyUsageSchema = {
  type: 'object',
  required: ['keyId', 'ownerId', 'plan', 'label', ...figureFields, 'window'],
  properties: {
    keyId: { type: 'string' },
    ownerId: { type: 'string' },
    plan: { type: 'string' },
    label: { type: ['string', 'null'] },
    ...figures,
    window: usageWindowSchema,
  },
} as const;

export const usageReportSchema = {
  type: 'object',
  required: ['from', 'to', 'granularity', 'totals', 'days', 'keys'],
  properties: {
    ownerId: { type: 'string' },
    keyId: { type: 'string' },
    from: { type: 'string', format: 'date' },
    to: { type: 'string', format: 'date' },
    granularity: { const: 'day' },
    totals: { type: 'object', required: figureFields, properties: figures },
    days: {
      type: 'array',
      description: 'One entry per UTC day of the range, oldest first (days without usage included)',
      items: {
        type: 'object',
        required: ['date', ...figureFields],
        properties: { date: { type: 'string', format: 'date' }, ...figures },
      },
    },
    keys: {
      type: 'array',
      items: keyUsageSchema,
      description: 'Per key: figures over the range and the window',
    },
  },
} as const;
