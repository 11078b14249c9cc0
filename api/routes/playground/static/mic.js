// The playground's live microphone: capture through the AudioWorklet
// (pcm-worklet.js: 16 kHz PCM16 frames of 100 ms) to the realtime socket,
// with a 60-second `rt_` session token per connection; events and
// utterances shown as they arrive, reconnects as interface 7.3 says.
// Kept apart from app.js (the key, file, batch and usage panels), which
// hands it what it shares through `initMic`.

const $ = (id) => document.getElementById(id);
const STREAM_PATH = '/v1/audio/transcriptions/stream';

/** What the rest of the page lends: set by initMic. */
let page = null;

const mic = {
  ws: null,
  ctx: null,
  stream: null,
  node: null,
  wanted: false,
  backoffMs: 1000,
  utterances: new Map(),
  session: '',
  /** The socket's session exists (`session.created`): frames go to it from then on. */
  live: false,
  /** Connections in a row that closed before their session started. */
  early: 0,
  /** Frames captured while no session is open (before the first, between reconnects): sent when one starts. */
  queued: [],
};

/** Connections closed before their session started that are opened again at once (see onClose). */
const MAX_EARLY_RETRIES = 2;

/** At most this many 100 ms frames wait for a socket (older ones are dropped first). */
const MAX_QUEUED_FRAMES = 100;

/** After Stop: the longest wait for the sentence being spoken to come back before the socket closes. */
const STOP_DRAIN_MS = 5000;
/** After Stop: events the flush causes (a speech start the service had not yet reported) may be on their way. */
const STOP_SETTLE_MS = 500;

/**
 * A 100 ms frame from the worklet: to the socket once its session has
 * started, otherwise kept for it. Capture starts before the session token is fetched and the
 * socket opens, so the first words spoken after Start arrive then; sending
 * only while open dropped them, and the session heard the speech from
 * wherever the socket happened to open (issue 39).
 */
function onFrame(frame) {
  if (mic.ws && mic.live && mic.ws.readyState === WebSocket.OPEN) return mic.ws.send(frame);
  if (!mic.wanted) return;
  mic.queued.push(frame);
  if (mic.queued.length > MAX_QUEUED_FRAMES) mic.queued.shift();
}

function logEvent(text) {
  const li = document.createElement('li');
  li.textContent = `${new Date().toLocaleTimeString()} ${text}`;
  $('mic-events').prepend(li);
  while ($('mic-events').children.length > 200) $('mic-events').lastChild.remove();
}

function utteranceItem(index) {
  let li = mic.utterances.get(index);
  if (!li) {
    li = document.createElement('li');
    li.dataset.index = index;
    li.dataset.session = mic.session;
    li.className = 'pending';
    li.textContent = '…';
    mic.utterances.set(index, li);
    // Ordered by utterance_index within the session, whatever the arrival order.
    const later = [...$('utterances').children].find(
      (c) => c.dataset.session === mic.session && Number(c.dataset.index) > index,
    );
    $('utterances').insertBefore(li, later || null);
  }
  return li;
}

async function startAudio() {
  if (!navigator.mediaDevices || !window.AudioWorkletNode) {
    throw Object.assign(new Error('This browser cannot capture audio here (it needs HTTPS or localhost).'), {
      name: 'NotSupportedError',
    });
  }
  mic.stream = await navigator.mediaDevices.getUserMedia({
    audio: { channelCount: 1, echoCancellation: false, noiseSuppression: false, autoGainControl: false },
  });
  mic.ctx = new AudioContext();
  await mic.ctx.audioWorklet.addModule('/playground/pcm-worklet.js');
  const source = mic.ctx.createMediaStreamSource(mic.stream);
  mic.node = new AudioWorkletNode(mic.ctx, 'pcm16-resampler');
  mic.node.port.onmessage = (ev) => onFrame(ev.data);
  source.connect(mic.node);
}

function stopAudio() {
  mic.node?.disconnect();
  mic.stream?.getTracks().forEach((t) => t.stop());
  mic.ctx?.close().catch(() => {});
  mic.node = mic.stream = mic.ctx = null;
  mic.queued = [];
}

/** Interface 7.3: what to do after a close. */
function reconnectDelay(code, reason) {
  if (code === 4408 || (code === 1008 && reason === 'session_duration_limit')) return 0;
  if (code === 1013) return mic.backoffMs;
  return -1;
}

async function connect() {
  page.show($('mic-status'), 'Connecting…');
  const { token } = await page.api('/v1/audio/transcriptions/session-token', { method: 'POST' });
  const scheme = location.protocol === 'https:' ? 'wss' : 'ws';
  const ws = new WebSocket(
    `${scheme}://${location.host}${STREAM_PATH}?access_token=${encodeURIComponent(token)}`,
  );
  ws.binaryType = 'arraybuffer';
  mic.ws = ws;
  mic.live = false;
  ws.onmessage = (ev) => onEvent(JSON.parse(ev.data));
  ws.onclose = (ev) => onClose(ws, ev);
}

function onEvent(e) {
  switch (e.type) {
    case 'session.created':
      // What was captured while connecting goes first, in order.
      mic.live = true;
      mic.early = 0;
      for (const frame of mic.queued.splice(0)) mic.ws?.send(frame);
      // A new session (after a reconnect) numbers its utterances from 0 again.
      endUtterances();
      mic.session = e.session_id;
      mic.backoffMs = 1000;
      page.show(
        $('mic-status'),
        `Listening (session ${e.session_id}, ${e.plan} plan, ${Math.round(e.limits.remaining_audio_seconds)} s of audio left).`,
        'ok',
      );
      logEvent(`session.created ${e.session_id}`);
      break;
    case 'input_audio_buffer.speech_started':
      $('speech-indicator').hidden = false;
      utteranceItem(e.utterance_index);
      logEvent(`speech started #${e.utterance_index}`);
      break;
    case 'input_audio_buffer.speech_stopped':
      $('speech-indicator').hidden = true;
      logEvent(`speech stopped #${e.utterance_index} (${e.reason})`);
      break;
    case 'conversation.item.input_audio_transcription.completed': {
      const li = utteranceItem(e.utterance_index);
      li.className = 'done';
      li.innerHTML = '';
      const text = document.createElement('span');
      text.className = 'text';
      text.textContent = e.text || '(no words)';
      const meta = document.createElement('span');
      meta.className = 'meta';
      meta.textContent = ` ${(e.audio_duration_ms / 1000).toFixed(1)} s audio, ${Math.round(e.latency_ms)} ms latency`;
      li.append(text, meta);
      logEvent(`completed #${e.utterance_index} in ${Math.round(e.latency_ms)} ms`);
      break;
    }
    case 'service.throttled':
      logEvent('throttled: the service dropped audio frames');
      break;
    case 'error':
      page.show($('mic-status'), `Error: ${page.errorText(e)}`, 'error');
      logEvent(`error ${e.code}`);
      break;
    default:
      logEvent(e.type);
  }
}

function onClose(ws, ev) {
  if (mic.ws !== ws) return;
  mic.ws = null;
  $('speech-indicator').hidden = true;
  const what = `Connection closed: ${ev.code}${ev.reason ? ` ${ev.reason}` : ''}`;
  logEvent(what);
  // Closed without a word before its session started (uWebSockets.js 20.57 can drop a connection inside
  // its upgrade): no audio went to it, and a new connection at once loses none.
  const early = !mic.live && ev.code === 1006 && mic.early < MAX_EARLY_RETRIES;
  if (early) mic.early++;
  mic.live = false;
  const delay = !mic.wanted ? -1 : early ? 0 : reconnectDelay(ev.code, ev.reason);
  if (delay < 0) {
    page.show($('mic-status'), `${what}.`, ev.code === 1000 ? '' : 'error');
    stopMic();
    return;
  }
  page.show($('mic-status'), `${what}; reconnecting${delay ? ` in ${delay / 1000} s` : ''}…`, 'error');
  mic.backoffMs = Math.min(mic.backoffMs * 2, 30_000);
  setTimeout(() => mic.wanted && connect().catch(failMic), delay);
}

function failMic(err) {
  const denied = err.name === 'NotAllowedError' || err.name === 'SecurityError';
  page.show(
    $('mic-status'),
    denied
      ? 'Microphone access was denied. Allow it in the browser (the icon in the address bar) and press Start again.'
      : err.name === 'NotFoundError'
        ? 'No microphone was found.'
        : `Could not start: ${err.message}`,
    'error',
  );
  stopMic();
}

/** Utterances still in flight when a session ends never complete. */
function endUtterances() {
  for (const li of $('utterances').querySelectorAll('li.pending')) {
    li.className = 'lost';
    li.textContent = '(not transcribed: the session ended)';
  }
  mic.utterances = new Map();
}

function stopMic() {
  mic.wanted = false;
  $('speech-indicator').hidden = true;
  endUtterances();
  if (mic.ws) {
    const ws = mic.ws;
    mic.ws = null;
    ws.close(1000);
  }
  stopAudio();
  $('mic-start').disabled = !page.hasKey();
  $('mic-stop').disabled = true;
  page.refreshUsage();
}

/**
 * Stop: capture ends at once; the sentence being spoken is ended (`input_audio_buffer.flush`) and its
 * words awaited, bounded, before the socket closes. Closing at once lost it: the service cannot answer
 * a socket the client has closed.
 */
async function finishMic() {
  mic.wanted = false;
  stopAudio();
  $('mic-stop').disabled = true;
  const ws = mic.ws;
  if (ws && mic.live && ws.readyState === WebSocket.OPEN) {
    page.show($('mic-status'), 'Finishing the last sentence…');
    ws.send(JSON.stringify({ type: 'input_audio_buffer.flush' }));
    const t0 = Date.now();
    while (mic.ws === ws && Date.now() - t0 < STOP_DRAIN_MS) {
      const waiting = $('utterances').querySelector('li.pending');
      if (!waiting && Date.now() - t0 >= STOP_SETTLE_MS) break;
      await new Promise((r) => setTimeout(r, 50));
    }
  }
  page.show($('mic-status'), 'Stopped.');
  stopMic();
}

/** Wires the microphone panel; `deps`: { api, show, errorText, refreshUsage, hasKey } of app.js. */
export function initMic(deps) {
  page = deps;
  $('mic-start').addEventListener('click', async () => {
    $('mic-start').disabled = true;
    $('mic-stop').disabled = false;
    mic.wanted = true;
    try {
      await startAudio();
      await connect();
    } catch (err) {
      failMic(err);
    }
  });
  $('mic-stop').addEventListener('click', () => void finishMic());
}
