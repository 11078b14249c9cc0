// OpenAI's realtime SDK client, unchanged, transcribing a file through this service's /v1/realtime.
//   node samples/openai-realtime.mjs https://stt.example.com sk-... talk.wav
// (needs `npm install openai ws` and ffmpeg; over plain http give http://host:port: the SDK uses wss://, so
// put TLS in front, e.g. HAProxy as in docker/haproxy.cfg.)
import { execFileSync } from 'node:child_process';
import OpenAI from 'openai';
import { OpenAIRealtimeWS } from 'openai/realtime/ws';

const [base, apiKey, file] = process.argv.slice(2);
const client = new OpenAI({ apiKey, baseURL: `${base}/v1` });
const rt = new OpenAIRealtimeWS({ model: 'gpt-4o-transcribe' }, client);
rt.on('error', (e) => console.error(e.message));
rt.on('conversation.item.input_audio_transcription.completed', (e) => console.log(e.transcript));
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
  for (let off = 0; off < all.length; off += 4800)
    rt.send({ type: 'input_audio_buffer.append', audio: all.subarray(off, off + 4800).toString('base64') });
  setTimeout(() => rt.close(), 5000 + (all.length / 48000) * 1000);
});
