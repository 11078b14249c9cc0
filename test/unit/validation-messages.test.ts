/**
 * What a client reads when a field fails its schema (api/http/validate.ts): the rule in words, not
 * ajv's wording ("must NOT be valid") or the regular expression (found by a new-user trial).
 */
import { expect } from 'chai';
import { check } from '../../api/http/validate.js';
import { ApiError } from '../../api/http/errors.js';
import { issueKeyBody } from '../../api/routes/admin/schemas.js';
import { REQUEST_ID_PATTERN } from '../../api/batch/schemas.js';

function messageOf(schema: object, value: unknown): string {
  try {
    check(schema, value, 'body');
  } catch (err) {
    expect(err).to.be.instanceOf(ApiError);
    return (err as Error).message;
  }
  throw new Error('accepted');
}

describe('unit: validation messages in words', () => {
  it('a reserved owner, a control character, a non-http URL and a bad request_id are said in words', () => {
    const reserved = messageOf(issueKeyBody, { owner_id: 'default:x' });
    expect(reserved).to.equal('Field "owner_id" has a reserved value or one that is not allowed.');
    const label = messageOf(issueKeyBody, { label: 'a\u0000b' });
    expect(label).to.equal('Field "label" must not contain control, invisible or text-direction characters.');
    const url = messageOf(
      { type: 'object', properties: { audio_url: { type: 'string', pattern: '^[hH][tT][tT][pP][sS]?://' } } },
      { audio_url: 'ftp://x/y.wav' },
    );
    expect(url).to.equal('Field "audio_url" must be an http:// or https:// URL.');
    const id = messageOf(
      { type: 'object', properties: { request_id: { type: 'string', pattern: REQUEST_ID_PATTERN } } },
      { request_id: 'a b' },
    );
    expect(id).to.match(/^Field "request_id" must be 1-128 letters/);
    const long = messageOf(issueKeyBody, { label: 'x'.repeat(201) });
    expect(long).to.equal('Field "label" must be at most 200 characters.');
    const empty = messageOf(issueKeyBody, { plan: '' });
    expect(empty).to.equal('Field "plan" must be at least 1 character.');
    for (const m of [reserved, label, url, id, long, empty]) expect(m).to.not.match(/\^|must NOT|\\\\u/);
  });
});
