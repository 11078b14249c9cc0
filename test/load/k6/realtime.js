// k6 load test of the realtime tier: each VU opens WS /v1/audio/transcriptions/stream,
// streams real speech (a 16 kHz mono PCM16 WAV) in 100 ms binary frames at real-time
// pace for DURATION_S seconds, and records connect time and completion latency
// (speech_stopped -> completed). Loopback only.
//
//   k6 run -e URL=ws://127.0.0.1:8081/v1/audio/transcriptions/stream -e KEY=sk-... \
//          -e WAV=../shared/test-audio/jfk.wav -e VUS=50 -e DURATION_S=30 test/load/k6/realtime.js
import { WebSocket } from 'k6/websockets';
import { Trend, Counter } from 'k6/metrics';

const URL = __ENV.URL || 'ws://127.0.0.1:8081/v1/audio/transcriptions/stream';
const KEY = __ENV.KEY;
const DURATION_S = Number(__ENV.DURATION_S || 30);
const wav = open(__ENV.WAV || '../../../../shared/test-audio/jfk.wav', 'b');
const pcm = wav.slice(44); // canonical 44-byte header of the test clips
const FRAME = 3200; // 100 ms

const connectTime = new Trend('rt_connect_ms', true);
const completion = new Trend('rt_completion_ms', true);
const utterances = new Counter('rt_utterances');
const failed = new Counter('rt_failed_utterances');

export const options = {
  scenarios: {
    stream: { executor: 'constant-vus', vus: Number(__ENV.VUS || 20), duration: `${DURATION_S + 10}s`, gracefulStop: '15s' },
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
  let off = 0;
  let timer;
  ws.onopen = () => {
    connectTime.add(Date.now() - t0);
    timer = setInterval(() => {
      if (off + FRAME > pcm.byteLength) off = 0;
      ws.send(pcm.slice(off, off + FRAME));
      off += FRAME;
    }, 100);
    setTimeout(() => {
      clearInterval(timer);
      ws.close(1000);
    }, DURATION_S * 1000);
  };
  ws.onmessage = (m) => {
    if (typeof m.data !== 'string') return;
    const ev = JSON.parse(m.data);
    if (ev.type === 'input_audio_buffer.speech_stopped') stoppedAt[ev.utterance_index] = Date.now();
    if (ev.type === 'conversation.item.input_audio_transcription.completed') {
      utterances.add(1);
      if (ev.error) failed.add(1);
      if (stoppedAt[ev.utterance_index] !== undefined) completion.add(Date.now() - stoppedAt[ev.utterance_index]);
    }
  };
  ws.onclose = () => clearInterval(timer);
}
