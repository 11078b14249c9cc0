/**
 * An OpenAI-compatible speech worker for benchmarks, in its own process:
 * answers `POST /v1/audio/transcriptions` with verbose_json after a fixed
 * delay (FAKE_DELAY_MS), and `GET /health`. It stands for a GPU worker so the
 * realtime tier's own cost can be measured.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';

const delay = Number(process.env.FAKE_DELAY_MS ?? 100);
let started = 0;
let answered = 0;
if (process.env.FAKE_WORKER_TRACE)
  setInterval(
    () => process.stderr.write(`fake worker: ${started} started, ${answered} answered\n`),
    1000,
  ).unref();
const server = http.createServer((req, res) => {
  if (req.method === 'GET' && req.url === '/health') {
    res.setHeader('content-type', 'application/json');
    res.end(JSON.stringify({ ok: true, service: 'fake-worker' }));
    return;
  }
  started++;
  res.on('finish', () => answered++);
  let bytes = 0;
  req.on('data', (c: Buffer) => (bytes += c.length));
  req.on('end', () => {
    setTimeout(() => {
      const duration = bytes / 32000;
      res.setHeader('content-type', 'application/json');
      res.end(
        JSON.stringify({ text: 'hello world', language: 'english', duration, segments: [], words: [] }),
      );
    }, delay);
  });
});
server.keepAliveTimeout = 60_000;
server.listen(0, '127.0.0.1', () =>
  process.send?.({ type: 'listening', port: (server.address() as AddressInfo).port }),
);
