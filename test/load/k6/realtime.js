// k6 load test of the realtime tier: each VU opens WS /v1/audio/transcriptions/stream,
// streams real speech (a 16 kHz mono PCM16 WAV) in 100 ms binary frames at real-time
// pace until DURATION_S seconds from the start, and records connect time, completion
// latency (speech_stopped -> completed), refused handshakes and every close code.
// A VU the server closes or refuses reconnects (a new iteration): at once after 1001,
// 1008 and 4408; after a back-off for 1013 and refused handshakes. k6's WebSocket API
// does not expose a refused handshake's headers, so the back-off starts at RETRY_AFTER_S
// (default 2: what the server's Retry-After says when an instance is at capacity)
// and doubles up to 30 s. Through the load balancer: URL=ws://127.0.0.1:8080/...
//
//   k6 run -e URL=ws://127.0.0.1:8081/v1/audio/transcriptions/stream -e KEY=sk-... \
//          -e VUS=50 -e DURATION_S=30 test/load/k6/realtime.js
// (WAV, relative to this script, defaults to the JFK clip of test/audio; the key's plan
// must allow VUS concurrent connections. Without k6: npx tsx test/load/k6/node-runner.ts, same flags.)
import { WebSocket } from 'k6/websockets';
import { Trend, Counter } from 'k6/metrics';
import { setInterval, setTimeout, clearInterval, clearTimeout } from 'k6/timers';

const URL = __ENV.URL || 'ws://127.0.0.1:8081/v1/audio/transcriptions/stream';
const KEY = __ENV.KEY;
const DURATION_S = Number(__ENV.DURATION_S || 30);
const wav = open(__ENV.WAV || '../../audio/jfk.wav', 'b');
const pcm = wavSamples(wav);

// The samples of the WAV's `data` chunk (headers vary: jfk.wav carries a LIST chunk before it).
function wavSamples(buf) {
  const view = new DataView(buf);
  const tag = (at) => String.fromCharCode(...new Uint8Array(buf, at, 4));
  for (let at = 12; at + 8 <= buf.byteLength;) {
    const size = view.getUint32(at + 4, true);
    if (tag(at) === 'data') return buf.slice(at + 8, Math.min(buf.byteLength, at + 8 + size));
    at += 8 + size + (size % 2);
  }
  throw new Error('no data chunk in the WAV');
}
const FRAME = 3200; // 100 ms

const connectTime = new Trend('rt_connect_ms', true);
const completion = new Trend('rt_completion_ms', true);
const utterances = new Counter('rt_utterances');
const failed = new Counter('rt_failed_utterances');
const refused = new Counter('rt_refused_connects');
const reconnects = new Counter('rt_reconnects');
// Connections closed before session.created (docs/realtime.md: open again at once; no session existed).
const earlyCloses = new Counter('rt_early_closes');
// Close codes as metrics: one counter per code (custom metrics exist from the init stage).
const CLOSE_CODES = [1000, 1001, 1006, 1008, 1009, 1011, 1013, 4408];
const closes = {};
for (const code of CLOSE_CODES) closes[code] = new Counter(`rt_close_${code}`);
const otherCloses = new Counter('rt_close_other');
// Closes the server started (all but our own 1000), whatever the code.
const serverCloses = new Counter('rt_server_closes');

const RETRY_AFTER_S = Number(__ENV.RETRY_AFTER_S || 2);
const STREAM_END = Date.now() + DURATION_S * 1000;

export const options = {
  scenarios: {
    // Each iteration is one connection; a VU whose connection the server ended starts another.
    stream: {
      executor: 'constant-vus',
      vus: Number(__ENV.VUS || 20),
      duration: `${DURATION_S}s`,
      gracefulStop: '30s',
    },
  },
  thresholds: {
    rt_connect_ms: ['p(99)<1000'],
    rt_completion_ms: ['p(99)<3000'],
    rt_failed_utterances: ['count<1'],
    // Overload refuses new sessions; it never closes open ones.
    rt_close_1013: ['count<1'],
  },
};

// Per VU: refusals and 1013s in a row, whether to back off, and whether the server ended the last
// connection. Keyed by __VU: k6 runs this module once per VU, the Node runner once for all of them.
const states = {};
const vuState = () => (states[__VU] = states[__VU] || { streak: 0, backOff: false, closedByServer: false });

export default function () {
  const left = STREAM_END - Date.now();
  if (left <= 0) return;
  const st = vuState();
  if (st.backOff) {
    // Wait out the back-off (RETRY_AFTER_S, doubling per refusal in a row), then let the next iteration connect.
    st.backOff = false;
    const waitS = Math.min(30, RETRY_AFTER_S * 2 ** Math.max(0, st.streak - 1));
    setTimeout(() => {}, Math.min(left, waitS * 1000));
    return;
  }
  if (st.closedByServer) reconnects.add(1);
  connectOnce(st);
}

function connectOnce(st) {
  const t0 = Date.now();
  const ws = new WebSocket(URL, null, { headers: { Authorization: `Bearer ${KEY}` } });
  ws.binaryType = 'arraybuffer';
  const stoppedAt = {};
  let opened = false;
  let created = false;
  let pending = 0; // utterances stopped and not yet completed
  let draining = false;
  let ours = false;
  let off = 0;
  let timer;
  let drainCap;
  let endTimer;
  const finish = () => {
    clearTimeout(drainCap);
    ours = true;
    ws.close(1000);
  };
  ws.onopen = () => {
    opened = true;
    st.closedByServer = false;
    st.streak = 0;
    connectTime.add(Date.now() - t0);
  };
  // Audio goes once the session exists, as docs/realtime.md asks of clients.
  const start = () => {
    created = true;
    timer = setInterval(() => {
      if (off + FRAME > pcm.byteLength) off = 0;
      ws.send(pcm.slice(off, off + FRAME));
      off += FRAME;
    }, 100);
    endTimer = setTimeout(
      () => {
        // Stop the audio, end the open utterance, and wait for what is in flight.
        clearInterval(timer);
        draining = true;
        ws.send(JSON.stringify({ type: 'input_audio_buffer.flush' }));
        drainCap = setTimeout(finish, 15000);
      },
      Math.max(0, STREAM_END - Date.now()),
    );
  };
  ws.onmessage = (m) => {
    if (typeof m.data !== 'string') return;
    const ev = JSON.parse(m.data);
    if (ev.type === 'session.created' && !created) start();
    if (ev.type === 'input_audio_buffer.speech_stopped') {
      stoppedAt[ev.utterance_index] = Date.now();
      pending++;
    }
    if (ev.type === 'conversation.item.input_audio_transcription.completed') {
      utterances.add(1);
      if (ev.error) failed.add(1);
      if (stoppedAt[ev.utterance_index] !== undefined) {
        completion.add(Date.now() - stoppedAt[ev.utterance_index]);
        pending--;
      }
      if (draining && pending === 0) finish();
    }
  };
  ws.onerror = () => {
    if (!opened) {
      // Refused handshake (503 at capacity, 429 quota): back off before the next iteration.
      refused.add(1);
      st.closedByServer = true;
      st.streak++;
      st.backOff = true;
    }
  };
  ws.onclose = (e) => {
    clearInterval(timer);
    clearTimeout(drainCap);
    clearTimeout(endTimer);
    if (!opened) return;
    if (!created && e.code === 1006) {
      // Closed right after its 101, before the session (uWebSockets.js 20.57, decisions/realtime.md):
      // the next iteration opens it again at once.
      earlyCloses.add(1);
      return;
    }
    (closes[e.code] || otherCloses).add(1);
    if (ours && e.code === 1000) return;
    serverCloses.add(1);
    st.closedByServer = true;
    // 1013 (try again later): back off; going away, duration limits: reconnect at once.
    if (e.code === 1013) {
      st.streak++;
      st.backOff = true;
    }
  };
}
