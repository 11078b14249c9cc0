/**
 * JSON schemas of the batch plane: the ajv validator of the job request and
 * the OpenAPI document are both built from these objects.
 */
import { WORKFLOW_STATUSES } from './types.js';
import { RESPONSE_FORMATS } from '../../shared/stt/formats.js';
import { MIN_SEGMENT_SECONDS } from '../../shared/config/batch.js';
import { FREE_TEXT, PRINTABLE_TEXT } from '../../shared/validation.js';

/**
 * Every number of a request has both bounds in its schema: JSON's `1e309`
 * parses as Infinity, which an open-ended `exclusiveMinimum: 0` lets through
 * (test/surface/bounds.test.ts walks every request schema for this).
 */
export const MAX_SEGMENT_SECONDS = 3600;
const MAX_CONCURRENCY_ASKED = 1000;

export const WORKFLOW_ID_PATTERN = '^cf_[0-9a-f]{64}$';
export const WORKFLOW_ID_RE = new RegExp(WORKFLOW_ID_PATTERN);
/** request_id becomes part of object keys, so it is limited to key-safe characters. */
export const REQUEST_ID_PATTERN = '^(?!\\.{1,2}$)[A-Za-z0-9._:-]{1,128}$';

export const jobRequestSchema = {
  type: 'object',
  additionalProperties: false,
  required: ['audio_url'],
  properties: {
    audio_url: {
      type: 'string',
      maxLength: 4096,
      pattern: '^[hH][tT][tT][pP][sS]?://',
      format: 'uri',
      description:
        'Public http(s) URL of the audio. Fetched once, temporarily; loopback and private addresses are refused.',
    },
    request_id: {
      type: 'string',
      pattern: REQUEST_ID_PATTERN,
      description:
        'Idempotency key (default: random UUID). Letters, digits and `._:-`, up to 128 characters. Resubmitting resumes from stored checkpoints.',
    },
    language: { type: 'string', minLength: 1, maxLength: 16, description: 'Language hint, e.g. `en`.' },
    model: {
      type: 'string',
      minLength: 1,
      maxLength: 200,
      pattern: PRINTABLE_TEXT,
      description: 'STT model override.',
    },
    prompt: {
      type: 'string',
      maxLength: 2000,
      pattern: FREE_TEXT,
      description: 'Transcription context hint.',
    },
    segment_seconds: {
      type: 'number',
      exclusiveMinimum: 0,
      maximum: MAX_SEGMENT_SECONDS,
      default: 300,
      description: `Target slice length in seconds (> 0, at most ${MAX_SEGMENT_SECONDS}; below ${MIN_SEGMENT_SECONDS} counts as ${MIN_SEGMENT_SECONDS}).`,
    },
    response_format: {
      type: 'string',
      enum: RESPONSE_FORMATS,
      default: 'verbose_json',
      description: 'Per-chunk format; the workflow always uses `verbose_json` per chunk.',
    },
    concurrency: {
      type: 'number',
      exclusiveMinimum: 0,
      maximum: MAX_CONCURRENCY_ASKED,
      default: 6,
      description: `Chunks transcribed at once (> 0, at most ${MAX_CONCURRENCY_ASKED}; the server setting BATCH_MAX_CONCURRENCY lowers it further).`,
    },
    webhook_url: {
      type: 'string',
      maxLength: 4096,
      pattern: '^[hH][tT][tT][pP][sS]?://',
      format: 'uri',
      description:
        'Receives the result (raw and reviewed) by a signed POST on completion (see docs/webhooks.md).',
    },
    review: { type: 'boolean', default: false, description: 'Run the two-stage review.' },
    metadata: {
      type: 'object',
      description:
        'Free-form context for the review stages, e.g. `{specialty, speaker_roles, known_terms}`. ' +
        'At most 64 KiB as JSON (BATCH_METADATA_MAX_BYTES), 8 levels of nesting and 1000 distinct terms; ' +
        'more is refused with 400.',
    },
  },
} as const;

export const jobAcceptedSchema = {
  type: 'object',
  required: ['request_id', 'workflow_id', 'status', 'endpoint', 'poll_endpoint'],
  properties: {
    request_id: { type: 'string' },
    workflow_id: { type: 'string', pattern: WORKFLOW_ID_PATTERN },
    status: { type: 'string', const: 'queued' },
    endpoint: { type: 'string', description: '`GET /{workflow_id}`' },
    poll_endpoint: { type: 'string', description: '`GET /v1/audio/transcriptions/jobs/{workflow_id}`' },
  },
} as const;

const segmentSchema = {
  type: 'object',
  required: ['id', 'start_time', 'end_time', 'duration', 'text', 'confidence'],
  properties: {
    id: { type: 'integer' },
    start_time: { type: 'number' },
    end_time: { type: 'number' },
    duration: { type: 'number' },
    text: { type: 'string' },
    confidence: { type: 'number' },
  },
} as const;

export const resultSchema = {
  type: 'object',
  required: ['segments', 'summary', 'metadata'],
  properties: {
    text: { type: 'string' },
    segments: { type: 'array', items: segmentSchema },
    summary: {
      type: 'object',
      required: ['total_duration', 'total_speech_duration', 'overall_speech_ratio', 'num_segments'],
      properties: {
        total_duration: { type: 'number' },
        total_speech_duration: { type: 'number' },
        overall_speech_ratio: { type: 'number' },
        num_segments: { type: 'number' },
      },
    },
    metadata: {
      type: 'object',
      required: ['language', 'model', 'chunk_count', 'audio_duration_seconds'],
      properties: {
        language: { type: 'string' },
        model: { type: 'string' },
        chunk_count: { type: 'integer' },
        audio_duration_seconds: { type: 'number' },
      },
    },
  },
} as const;

export const stepSchema = {
  type: 'object',
  required: ['name', 'status', 'started_at', 'ended_at', 'attempts'],
  properties: {
    name: {
      type: 'string',
      description: '`probe`, `slice`, `transcribe_chunk_{i}`, `aggregate`, `review`, `report`, `webhook`',
    },
    status: { type: 'string', enum: ['queued', 'running', 'complete', 'errored', 'skipped', 'waiting'] },
    started_at: { type: ['string', 'null'], format: 'date-time' },
    ended_at: { type: ['string', 'null'], format: 'date-time' },
    attempts: { type: 'integer' },
  },
} as const;

export const workflowStatusSchema = {
  type: 'object',
  required: ['workflow_id', 'status', 'steps', 'error'],
  properties: {
    workflow_id: { type: 'string', pattern: WORKFLOW_ID_PATTERN },
    request_id: { type: 'string' },
    status: { type: 'string', enum: WORKFLOW_STATUSES },
    steps: { type: 'array', items: stepSchema },
    output: {
      type: 'object',
      description: 'Present when complete.',
      properties: {
        probe: { type: 'object' },
        slice: { type: 'object' },
        chunks: { type: 'array', items: { type: 'object' } },
        aggregate: { type: 'object' },
        review: { type: ['object', 'null'] },
        report: { type: 'object' },
        result: resultSchema,
      },
    },
    error: {
      type: ['object', 'null'],
      required: ['name', 'message'],
      properties: { name: { type: 'string' }, message: { type: 'string' } },
    },
  },
} as const;
