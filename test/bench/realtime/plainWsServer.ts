/**
 * The comparison server of the realtime benchmark: the same session code
 * (auth, quota leases, VAD, utterances, metering) behind a plain `ws`
 * WebSocketServer on node:http instead of uWebSockets.js.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { performance } from 'node:perf_hooks';
import { WebSocketServer } from 'ws';
import { loadConfig, type ConfigOverrides } from '../../../shared/config/index.js';
import { createLogger } from '../../../shared/logger.js';
import { windowUsage } from '../../../shared/usage.js';
import { createVadService } from '../../../realtime/vad/service.js';
import { createRealtimeDeps } from '../../../realtime/main.js';
import { CircuitBreaker } from '../../../realtime/breaker.js';
import { ConnectionQuota } from '../../../realtime/quota.js';
import { UsageMeter } from '../../../realtime/metering.js';
import { realtimeCredential } from '../../../realtime/admission.js';
import { RealtimeSession, newSessionId } from '../../../realtime/session.js';
import { GatewayTimings } from '../../../realtime/timings.js';

// Internal tuning laid over the environment's settings, as tunedRealtime.ts does for realtime/main.ts.
const config = loadConfig(process.env, JSON.parse(process.argv[2] ?? '{}') as ConfigOverrides);
const logger = createLogger({ level: 'warn' });
const deps = await createRealtimeDeps(config, logger);
const rt = config.realtime;
const breaker = new CircuitBreaker(rt.breaker);
const quota = new ConnectionQuota(deps.limits, rt, logger);
// Declared before the meter: its checkpoint timer may fire while the VAD threads start.
const sessions = new Set<RealtimeSession>();
const meter = new UsageMeter(deps.ledger, deps.budget, () => sessions, config.ledger.checkpointMs);
const vad = await createVadService(rt.vad.threads, rt.vad);
const timings = new GatewayTimings();

const server = http.createServer((req, res) => {
  if (req.url?.startsWith('/stats')) {
    res.setHeader('content-type', 'application/json');
    res.end(JSON.stringify({ sessions: sessions.size, vad: vad.stats(), ...timings.snapshot() }));
    if (req.url.includes('reset=1')) timings.reset();
    return;
  }
  res.statusCode = 404;
  res.end();
});
const wss = new WebSocketServer({
  noServer: true,
  maxPayload: Math.ceil(rt.maxFrameBytes * 1.5) + 1024,
  perMessageDeflate: false,
});

server.on('upgrade', (req, socket, head) => {
  const u = new URL(req.url ?? '/', 'http://x');
  const refuse = (status: number, code: string) => {
    socket.end(
      `HTTP/1.1 ${status} Refused\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n${JSON.stringify({ error: { code } })}`,
    );
  };
  const cred = realtimeCredential(req.headers.authorization ?? '', u.search.slice(1));
  if (cred.failure) return refuse(cred.failure.status, cred.failure.code);
  void (async () => {
    const auth = await deps.auth.authenticate(cred.token!);
    if (!auth.ok) return refuse(auth.status, auth.code);
    const sessionId = newSessionId();
    const admitted = await quota.admit(auth.principal.keyId, auth.principal.limits, sessionId);
    if (!admitted.ok) return refuse(admitted.status, admitted.code);
    const used = await windowUsage(deps.db, auth.principal.keyId, config.usageWindowSeconds);
    wss.handleUpgrade(req, socket, head, (ws) => {
      let closed = false;
      const session = new RealtimeSession(
        auth.principal,
        auth.principal.limits.maxAudioSecondsPerWindow - used,
        {
          send: (text) => !closed && ws.send(text),
          bufferedAmount: () => ws.bufferedAmount,
          close: (code, reason) => {
            if (closed) return;
            closed = true;
            ws.close(code, reason);
          },
        },
        {
          config: rt,
          engine: deps.engine,
          breaker,
          vad,
          logger,
          now: () => performance.now(),
          onCompleted: (l: number, e: number) => timings.recordCompletion(l, e),
        },
        { sessionId },
      );
      sessions.add(session);
      session.onEnded = (s) => {
        sessions.delete(session);
        void quota.release(s.sessionId);
        meter.record(s.keyId, s.sessionId, s.audioSeconds);
      };
      ws.on('message', (data, isBinary) => {
        const buf = data as Buffer;
        if (isBinary)
          session.onBinary(buf.buffer.slice(buf.byteOffset, buf.byteOffset + buf.byteLength) as ArrayBuffer);
        else session.onText(buf.toString('utf8'));
      });
      ws.on('close', (code) => {
        closed = true;
        session.onTransportClosed(code);
      });
      session.start();
    });
  })();
});

const tick = setInterval(() => {
  for (const s of sessions) s.tick();
}, rt.tickMs);
tick.unref();
server.listen(0, '127.0.0.1', () =>
  process.send?.({ type: 'realtime.listening', port: (server.address() as AddressInfo).port }),
);
// Graceful exit on SIGTERM (writes --cpu-prof profiles when the benchmark asks for them).
process.on('SIGTERM', () => process.exit(0));
