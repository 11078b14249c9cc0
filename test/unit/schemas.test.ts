/** Request schemas and the types derived from them, checked by the project's one ajv: no server, no database. */
import { expect } from 'chai';
import { compile } from '../../shared/validation.js';
import { jobRequestSchema } from '../../api/batch/schemas.js';
import type { JobRequest } from '../../api/batch/types.js';
import { issueKeyBody, type IssueKeyBody } from '../../api/routes/admin/schemas.js';
import { segmentFieldsSchema, type SegmentFields } from '../../api/routes/segment/schemas.js';
import { scrubSecrets } from '../../shared/logger.js';
import { firstLine } from '../../shared/db/index.js';

/** Validates like the routes do, returning the value as its derived type. */
function valid<T>(schema: object, value: unknown): T {
  const v = compile(schema);
  expect(v(value), JSON.stringify(v.errors)).to.equal(true);
  return value as T;
}

describe('unit: request schemas', () => {
  it('fills a job request with the schema defaults its type promises', () => {
    const body = valid<JobRequest>(jobRequestSchema, { audio_url: 'https://example.com/a.mp3' });
    const defaults: Pick<JobRequest, 'segment_seconds' | 'response_format' | 'concurrency' | 'review'> = {
      segment_seconds: body.segment_seconds,
      response_format: body.response_format,
      concurrency: body.concurrency,
      review: body.review,
    };
    expect(defaults).to.deep.equal({
      segment_seconds: 300,
      response_format: 'verbose_json',
      concurrency: 6,
      review: false,
    });
  });

  it('refuses unknown fields and non-http URLs in a job request', () => {
    const v = compile(jobRequestSchema);
    expect(v({ audio_url: 'https://example.com/a.mp3', colour: 'red' })).to.equal(false);
    expect(v({ audio_url: 'ftp://example.com/a.mp3' })).to.equal(false);
  });

  it('gives an issued key the default owner', () => {
    const body = valid<IssueKeyBody>(issueKeyBody, { plan: 'pro' });
    expect(body.owner_id).to.equal('default');
  });

  it('defaults the segment form response_format, accepts unknown fields and refuses unknown formats', () => {
    const fields = valid<SegmentFields>(segmentFieldsSchema, { language: 'en', temperature: '0' });
    expect(fields.response_format).to.equal('verbose_json');
    const v = compile(segmentFieldsSchema);
    expect(v({ response_format: 'xml' })).to.equal(false);
    expect(v.errors?.[0]?.instancePath).to.equal('/response_format');
  });
});

describe('unit: secret scrubbing of log lines', () => {
  it('keeps a knex message and drops the stack it may carry (no server paths in the log)', () => {
    // As a full suite run logged it when Postgres was slow to hand out a connection.
    const m = `Acquire connection error: Error: operation timed out for an unknown reason
    at /srv/app/node_modules/tarn/dist/PendingOperation.js:18:27
    at runNextTicks (node:internal/process/task_queues:65:5)`;
    expect(firstLine(m)).to.equal(
      'Acquire connection error: Error: operation timed out for an unknown reason',
    );
    expect(firstLine(new Error('x'))).to.equal('Error: x');
  });

  it('redacts API keys, session tokens and bearer credentials', () => {
    const key = 'sk-' + 'k'.repeat(40);
    expect(scrubSecrets(`key ${key} token rt_abcdefgh.ijk Bearer xyz123`)).to.equal(
      'key sk-[redacted] token rt_[redacted] Bearer [redacted]',
    );
    expect(scrubSecrets('nothing here')).to.equal('nothing here');
  });
});
