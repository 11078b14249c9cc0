import type { FromSchema } from 'json-schema-to-ts';
import { planLimitsSchema } from '../../openapi/schemas.js';
import { DEFAULT_OWNER } from '../../../shared/auth/keyStore.js';
import { PRINTABLE_TEXT } from '../../../shared/validation.js';

const NO_CONTROL_CHARS = PRINTABLE_TEXT;

export const issueKeyBody = {
  type: 'object',
  additionalProperties: false,
  properties: {
    owner_id: {
      type: 'string',
      minLength: 1,
      maxLength: 200,
      pattern: NO_CONTROL_CHARS,
      // `default:` names the tenants of keys issued with the default owner (shared/auth/keyStore.ts).
      // (`type` inside `not`: a number is refused by `type` above, as "must be of type string".)
      not: { type: 'string', pattern: '^default:' },
      default: DEFAULT_OWNER,
      description:
        'Tenant of the key (stored in Unicode NFC). Keys of one owner share its jobs, artifacts and request_ids. The default owner `default` shares nothing: each key issued with it is a tenant of its own.',
    },
    plan: { type: 'string', minLength: 1, maxLength: 100, pattern: NO_CONTROL_CHARS },
    label: { type: 'string', maxLength: 200, pattern: NO_CONTROL_CHARS },
    expires_at: { type: 'string', format: 'date-time', description: 'ISO 8601 date-time in the future.' },
  },
} as const;

/** The issue request as the validator leaves it (`owner_id` filled in by its default). */
export type IssueKeyBody = FromSchema<typeof issueKeyBody>;

export const listKeysQuery = {
  type: 'object',
  additionalProperties: false,
  properties: {
    owner_id: { type: 'string', minLength: 1, maxLength: 200, pattern: NO_CONTROL_CHARS },
  },
} as const;

/** Key ids are `key_` + 24 hex; anything else cannot name a key. */
export const keyIdParam = { type: 'string', maxLength: 28, pattern: '^key_[0-9a-f]{24}$' } as const;

export const keyRecordSchema = {
  type: 'object',
  required: [
    'id',
    'ownerId',
    'keyPrefix',
    'lastFour',
    'plan',
    'status',
    'expiresAt',
    'revokedAt',
    'lastUsedAt',
    'createdAt',
    'limits',
  ],
  properties: {
    key: { type: 'string', description: 'Plaintext key; present only in the issue response.' },
    id: { type: 'string' },
    ownerId: { type: 'string' },
    keyPrefix: { type: 'string', description: '`sk-` plus 9 characters' },
    lastFour: { type: 'string' },
    plan: { type: 'string' },
    status: { type: 'string', enum: ['active', 'revoked', 'expired'] },
    label: { type: ['string', 'null'] },
    expiresAt: { type: ['string', 'null'], format: 'date-time' },
    revokedAt: { type: ['string', 'null'], format: 'date-time' },
    lastUsedAt: { type: ['string', 'null'], format: 'date-time' },
    createdAt: { type: 'string', format: 'date-time' },
    limits: planLimitsSchema,
  },
} as const;

export const planSchema = {
  type: 'object',
  required: ['plan', 'limits'],
  properties: { plan: { type: 'string' }, limits: planLimitsSchema },
} as const;
