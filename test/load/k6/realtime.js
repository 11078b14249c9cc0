// k6 load test of the realtime tier: each VU opens WS /v1/audio/transcriptions/stream,
// streams real speech (a 16 kHz mono PCM16 WAV) in 100 ms binary frames at real-time
// pace for DURATION_S seconds, and records connect time and completion latency
// (speech_stopped -> completed). Loopback only.
//
//   k6 run -e URL=ws://127.0.0.1:8081/v1/audio/transcriptions/stream -e KEY=sk-... \
//          -e VUS=50 -e DURATION_S=30 test/load/k6/realtime.js
// (WAV, relative to this script, defaults to the JFK clip of ../shared/test-audio; the key's plan
// must allow VUS concurrent connections. Without k6: npx tsx test/load/k6/node-runner.ts, same flags.)
import { WebSocket } from 'k6/websockets';
import { Trend, Counter } from 'k6/metrics';
import { setInterval, setTimeout, clearInterval, clearTimeout } from 'k6/timers';

const URL = __ENV.URL || 'ws://127.0.0.1:8081/v1/audio/transcriptions/stream';
const KEY = __ENV.KEY;
const DURATION_S = Number(__ENV.DURATION_S || 30);
const wav = open(__ENV.WAV || '../../../../shared/test-audio/jfk.wav', 'b');
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

export const options = {
  scenarios: {
    // One iteration per VU: it streams for DURATION_S, then drains (gracefulStop covers the drain).
    stream: {
      executor: 'constant-vus',
      vus: Number(__ENV.VUS || 20),
      duration: `${DURATION_S}s`,
      gracefulStop: '30s',
    },
  },
  thresholds: {
    rt_connect_ms: ['p(99)<500'],
    rt_completion_ms: ['p(99)<3000'],
    rt_failed_utterances: ['count<1'],
  },
};

export default function () {
  const t0 = Date.now();
  const ws = new WebSocket(URL, null, { headers: { Authorization: `Bearer ${KEY}` } });
  ws.binaryType = 'arraybuffer';
  const stoppedAt = {};
  let pending = 0; // utterances stopped and not yet completed
  let draining = false;
  let off = 0;
  let timer;
  let drainCap;
  const finish = () => {
    clearTimeout(drainCap);
    ws.close(1000);
  };
  ws.onopen = () => {
    connectTime.add(Date.now() - t0);
    timer = setInterval(() => {
      if (off + FRAME > pcm.byteLength) off = 0;
      ws.send(pcm.slice(off, off + FRAME));
      off += FRAME;
    }, 100);
    setTimeout(() => {
      // Stop the audio, end the open utterance, and wait for what is in flight.
      clearInterval(timer);
      draining = true;
      ws.send(JSON.stringify({ type: 'input_audio_buffer.flush' }));
      drainCap = setTimeout(finish, 15000);
    }, DURATION_S * 1000);
  };
  ws.onmessage = (m) => {
    if (typeof m.data !== 'string') return;
    const ev = JSON.parse(m.data);
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
  ws.onclose = () => {
    clearInterval(timer);
    clearTimeout(drainCap);
  };
}
