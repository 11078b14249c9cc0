import { randomBytes } from 'node:crypto';

/** A request body and the Content-Type header that goes with it. */
export interface MultipartBody {
  body: Buffer;
  contentType: string;
}

/**
 * A multipart/form-data body (RFC 7578) as one buffer: the fields, then the
 * file, given as its parts (a header and the samples are copied once, into
 * the body). The speech workers' uploads (shared/stt/remote.ts) are sent
 * with undici's `request` rather than `fetch` + `FormData`, whose web
 * streams, Blob and promises per upload made the speech upload the largest
 * source of garbage on the realtime tier's event loop (docs/benchmarks.md).
 * The boundary is random and checked against the field values (the prompt
 * is the caller's text); names are our own.
 */
export function multipartBody(
  fields: [string, string][],
  file: { name: string; filename: string; type: string; data: Buffer | Buffer[] },
): MultipartBody {
  let boundary: string;
  do boundary = `----stt${randomBytes(12).toString('hex')}`;
  while (fields.some(([, value]) => value.includes(boundary)));
  let head = '';
  for (const [name, value] of fields) {
    head += `--${boundary}\r\nContent-Disposition: form-data; name="${name}"\r\n\r\n${value}\r\n`;
  }
  head +=
    `--${boundary}\r\nContent-Disposition: form-data; name="${file.name}"; filename="${file.filename}"\r\n` +
    `Content-Type: ${file.type}\r\n\r\n`;
  const tail = `\r\n--${boundary}--\r\n`;
  return {
    body: Buffer.concat([Buffer.from(head), ...[file.data].flat(), Buffer.from(tail)]),
    contentType: `multipart/form-data; boundary=${boundary}`,
  };
}
