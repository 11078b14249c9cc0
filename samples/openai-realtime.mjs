// OpenAI's realtime SDK client, unchanged, transcribing a file through this service's /v1/realtime.
//   node samples/openai-realtime.mjs https://stt.example.com sk-... talk.wav
// (needs `npm install openai ws` and ffmpeg.) The SDK dials wss://: against `npm start`, use its HTTPS
// port and the CA it prints (NODE_EXTRA_CA_CERTS=.data/tls/ca.pem, https://localhost:8443).
// The audio is sent at real-time pace, as a microphone would: faster, the server drops what it cannot
// take (service.throttled), and this prints it and exits 1.
import { execFileSync } from 'node:child_process';
import OpenAI from 'openai';
import { OpenAIRealtimeWS } from 'openai/realtime/ws';

const [base, apiKey, file] = process.argv.slice(2);
const client = new OpenAI({ apiKey, baseURL: `${base}/v1` });
const rt = new OpenAIRealtimeWS({ model: 'gpt-4o-transcribe' }, client);
let lost = 0;
rt.on('error', (e) => {
  console.error(`error: ${e.message}`);
  process.exitCode = 1;
});
rt.on('conversation.item.input_audio_transcription.completed', (e) => console.log(e.transcript));
// An extension of this service (docs/realtime.md): audio it dropped instead of transcribing.
rt.socket.on('message', (data) => {
  const e = JSON.parse(String(data));
  if (e.type !== 'service.throttled') return;
  lost += e.dropped_ms ?? 0;
  console.error(`the server dropped ${((e.dropped_ms ?? 0) / 1000).toFixed(1)} s of audio (${e.reason})`);
  process.exitCode = 1;
});
rt.socket.on(
  'close',
  () => lost && console.error(`${(lost / 1000).toFixed(1)} s of audio were not transcribed`),
);
rt.socket.on('open', () => {
  rt.send({
    type: 'session.update',
    session: {
      type: 'transcription',
      audio: {
        input: {
          format: { type: 'audio/pcm', rate: 24000 },
          transcription: { model: 'gpt-4o-transcribe', language: 'en' },
          turn_detection: { type: 'server_vad', silence_duration_ms: 500 },
        },
      },
    },
  });
  const pcm = execFileSync('ffmpeg', [
    '-loglevel',
    'error',
    '-i',
    file,
    '-ac',
    '1',
    '-ar',
    '24000',
    '-f',
    's16le',
    '-',
  ]);
  const all = Buffer.concat([pcm, Buffer.alloc(48000)]); // 1 s of silence ends the last turn
  // 100 ms of audio (4800 bytes at 24 kHz) every 100 ms.
  let off = 0;
  const timer = setInterval(() => {
    if (off >= all.length) {
      clearInterval(timer);
      setTimeout(() => rt.close(), 5000);
      return;
    }
    rt.send({ type: 'input_audio_buffer.append', audio: all.subarray(off, off + 4800).toString('base64') });
    off += 4800;
  }, 100);
});
