/** Request and response schemas of the segment endpoint. */
import type { FromSchema } from 'json-schema-to-ts';
import { RESPONSE_FORMATS } from '../../../shared/stt/formats.js';
import { FREE_TEXT, PRINTABLE_TEXT } from '../../../shared/validation.js';

/** The form's text fields, checked by the project's ajv (unknown fields are accepted, as OpenAI's SDK sends some). */
export const segmentFieldsSchema = {
  type: 'object',
  properties: {
    model: {
      type: 'string',
      pattern: PRINTABLE_TEXT,
      description: 'Model name passed to the service (ignored by the built-in engine)',
    },
    language: { type: 'string', pattern: PRINTABLE_TEXT, description: 'ISO-639-1 hint' },
    prompt: {
      type: 'string',
      maxLength: 2000,
      pattern: FREE_TEXT,
      description:
        'Context prompt (at most 2000 characters, as on the other planes; no control characters but tabs and line breaks)',
    },
    response_format: { type: 'string', enum: [...RESPONSE_FORMATS], default: 'verbose_json' },
    worker_id: { type: 'string', description: 'Pins a specific worker (no fallback then)' },
    'timestamp_granularities[]': {
      type: 'string',
      pattern: '^(word|segment)(,(word|segment))*$',
      description:
        "OpenAI's `word` and `segment`, once per value: checked, and changes nothing (verbose_json always carries both `segments` and `words`, interface 2.6)",
    },
    stream: {
      type: 'string',
      enum: ['true', 'false'],
      description:
        'OpenAI-compatible streaming: `true` answers `text/event-stream` with `transcript.text.delta` events, then `transcript.text.done` with the full text (response_format is then not used)',
    },
  },
} as const;

/** The form's text fields as the validator leaves them (`response_format` defaulted). */
export type SegmentFields = FromSchema<typeof segmentFieldsSchema>;

/**
 * The form's optional text fields as the OpenAPI document shows them. Swagger UI fills every form
 * field of "Try it out" with a sample of its schema (the word `string`, an enum's first value, a
 * default), which would then be sent: `stream=true` turned the answer into an event stream. An
 * empty example leaves each field empty, and an empty field counts as absent (`formFields`).
 */
const optionalFormFields = Object.fromEntries(
  Object.entries(segmentFieldsSchema.properties).map(([name, schema]) => [
    name,
    { ...schema, examples: [''] },
  ]),
);

/** The whole form, for the OpenAPI document: `file` is an upload (OpenAPI 3 multipart: a binary string). */
export const segmentRequestSchema = {
  type: 'object',
  required: ['file'],
  properties: {
    file: {
      type: 'string',
      format: 'binary',
      description: 'Speech clip: WAV, MP3, OGG/Opus, FLAC, M4A, WebM, ...',
    },
    ...optionalFormFields,
  },
};

export const verboseJsonSchema = {
  type: 'object',
  required: ['text', 'language', 'duration', 'segments', 'words'],
  properties: {
    task: { type: 'string' },
    text: { type: 'string' },
    language: { type: 'string' },
    duration: { type: 'number' },
    segments: {
      type: 'array',
      items: {
        type: 'object',
        required: ['id', 'start', 'end', 'text'],
        properties: {
          id: { type: 'integer' },
          start: { type: 'number' },
          end: { type: 'number' },
          text: { type: 'string' },
          confidence: { type: 'number' },
          avg_logprob: { type: 'number' },
        },
      },
    },
    words: {
      type: 'array',
      items: {
        type: 'object',
        required: ['word', 'start', 'end'],
        properties: {
          word: { type: 'string' },
          start: { type: 'number' },
          end: { type: 'number' },
          confidence: { type: 'number' },
        },
      },
    },
  },
} as const;
