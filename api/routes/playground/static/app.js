// The playground: plain browser JavaScript, no build step, no outside requests.
// The API key lives in `apiKey` only (never in storage or a URL); the realtime
// socket authenticates with a 60-second `rt_` session token minted with it.

const $ = (id) => document.getElementById(id);
let apiKey = '';

const STREAM_PATH = '/v1/audio/transcriptions/stream';

/** One line of text from an error body of any plane (api, batch, admin) or a realtime error event. */
function errorText(body, status) {
  const e = body && body.error;
  if (e && typeof e === 'object') return `${e.message} (${e.code})`;
  if (typeof e === 'string') return body.code ? `${e} (${body.code})` : e;
  if (body && body.type === 'error') return `${body.message} (${body.code})`;
  return `HTTP ${status}`;
}

function show(el, text, kind = '') {
  el.textContent = text;
  el.className = `status ${kind}`;
}

/** fetch with the key in the Authorization header; JSON or text back; throws an Error with the service's message. */
async function api(path, init = {}) {
  const res = await fetch(path, {
    ...init,
    headers: { ...(init.headers || {}), Authorization: `Bearer ${apiKey}` },
  });
  const type = res.headers.get('content-type') || '';
  const body = type.includes('json') ? await res.json().catch(() => null) : await res.text();
  if (!res.ok) {
    const err = new Error(errorText(body, res.status));
    err.status = res.status;
    err.retryAfter = res.headers.get('retry-after');
    throw err;
  }
  return body;
}

function download(name, text, type) {
  const url = URL.createObjectURL(new Blob([text], { type }));
  const a = Object.assign(document.createElement('a'), { href: url, download: name });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}

// ---------------------------------------------------------------- key

$('key-form').addEventListener('submit', async (ev) => {
  ev.preventDefault();
  const candidate = $('key').value.trim();
  $('key').value = '';
  if (!candidate.startsWith('sk-')) return show($('key-status'), 'An API key starts with sk-.', 'error');
  apiKey = candidate;
  try {
    const usage = await api('/v1/usage');
    const k = usage.keys[0];
    show(
      $('key-status'),
      `Key …${candidate.slice(-4)} (${k.plan} plan, owner ${usage.ownerId}) is ready.`,
      'ok',
    );
    for (const id of ['mic-start', 'usage-refresh']) $(id).disabled = false;
    document.querySelector('#batch-form button').disabled = false;
    renderUsage(usage);
  } catch (err) {
    apiKey = '';
    show($('key-status'), `Key refused: ${err.message}`, 'error');
  }
});

// ---------------------------------------------------------------- usage

const PLANE_UNITS = [
  ['segment', 'requests', 'segment requests'],
  ['realtime', 'sessions', 'realtime sessions'],
  ['batch', 'jobs', 'batch jobs'],
];

function renderUsage(u) {
  const rows = PLANE_UNITS.map(
    ([plane, unit, label]) =>
      `<tr><td>${label}</td><td>${u.totals.audioSeconds[plane].toFixed(1)}</td><td>${u.totals[unit]}</td></tr>`,
  );
  const tbody = $('usage-table').querySelector('tbody');
  tbody.innerHTML = rows.join('');
  $('usage-table').hidden = false;
  const w = u.keys[0].window;
  $('usage-window').textContent =
    `Billing window (last ${Math.round(w.seconds / 3600)} h): ${w.usedAudioSeconds.toFixed(1)} s of ` +
    `${w.maxAudioSecondsPerWindow} s used, ${w.remainingAudioSeconds.toFixed(1)} s left.`;
  show($('usage-status'), `As of ${new Date().toLocaleTimeString()}.`);
}

async function refreshUsage() {
  if (!apiKey) return;
  try {
    renderUsage(await api('/v1/usage'));
  } catch (err) {
    show($('usage-status'), err.message, 'error');
  }
}
$('usage-refresh').addEventListener('click', refreshUsage);

// ---------------------------------------------------------------- live microphone

const mic = {
  ws: null,
  ctx: null,
  stream: null,
  node: null,
  wanted: false,
  backoffMs: 1000,
  utterances: new Map(),
  session: '',
};

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
  mic.node.port.onmessage = (ev) => {
    if (mic.ws && mic.ws.readyState === WebSocket.OPEN) mic.ws.send(ev.data);
  };
  source.connect(mic.node);
}

function stopAudio() {
  mic.node?.disconnect();
  mic.stream?.getTracks().forEach((t) => t.stop());
  mic.ctx?.close().catch(() => {});
  mic.node = mic.stream = mic.ctx = null;
}

/** Interface 7.3: what to do after a close. */
function reconnectDelay(code, reason) {
  if (code === 4408 || (code === 1008 && reason === 'session_duration_limit')) return 0;
  if (code === 1013) return mic.backoffMs;
  return -1;
}

async function connect() {
  show($('mic-status'), 'Connecting…');
  const { token } = await api('/v1/audio/transcriptions/session-token', { method: 'POST' });
  const scheme = location.protocol === 'https:' ? 'wss' : 'ws';
  const ws = new WebSocket(
    `${scheme}://${location.host}${STREAM_PATH}?access_token=${encodeURIComponent(token)}`,
  );
  ws.binaryType = 'arraybuffer';
  mic.ws = ws;
  ws.onmessage = (ev) => onEvent(JSON.parse(ev.data));
  ws.onclose = (ev) => onClose(ws, ev);
}

function onEvent(e) {
  switch (e.type) {
    case 'session.created':
      // A new session (after a reconnect) numbers its utterances from 0 again.
      endUtterances();
      mic.session = e.session_id;
      mic.backoffMs = 1000;
      show(
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
      show($('mic-status'), `Error: ${errorText(e)}`, 'error');
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
  const delay = mic.wanted ? reconnectDelay(ev.code, ev.reason) : -1;
  if (delay < 0) {
    show($('mic-status'), `${what}.`, ev.code === 1000 ? '' : 'error');
    stopMic();
    return;
  }
  show($('mic-status'), `${what}; reconnecting${delay ? ` in ${delay / 1000} s` : ''}…`, 'error');
  mic.backoffMs = Math.min(mic.backoffMs * 2, 30_000);
  setTimeout(() => mic.wanted && connect().catch(failMic), delay);
}

function failMic(err) {
  const denied = err.name === 'NotAllowedError' || err.name === 'SecurityError';
  show(
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
  $('mic-start').disabled = !apiKey;
  $('mic-stop').disabled = true;
  refreshUsage();
}

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
$('mic-stop').addEventListener('click', () => {
  show($('mic-status'), 'Stopped.');
  stopMic();
});

// ---------------------------------------------------------------- file drop

let lastTranscript = null;

const pad = (n, w = 2) => String(n).padStart(w, '0');
function stamp(seconds, sep) {
  const ms = Math.round(seconds * 1000);
  const h = Math.floor(ms / 3_600_000);
  const m = Math.floor(ms / 60_000) % 60;
  const s = Math.floor(ms / 1000) % 60;
  return `${pad(h)}:${pad(m)}:${pad(s)}${sep}${pad(ms % 1000, 3)}`;
}
function captions(t, kind) {
  const cues = t.segments.map((s, i) => {
    const sep = kind === 'srt' ? ',' : '.';
    const head = kind === 'srt' ? `${i + 1}\n` : '';
    return `${head}${stamp(s.start, sep)} --> ${stamp(s.end, sep)}\n${s.text.trim()}\n`;
  });
  return (kind === 'vtt' ? 'WEBVTT\n\n' : '') + cues.join('\n');
}

async function transcribeFile(file) {
  if (!apiKey) return show($('file-status'), 'Paste an API key first.', 'error');
  show($('file-status'), `Uploading ${file.name} (${Math.ceil(file.size / 1024)} KiB) and transcribing…`);
  $('file-text').textContent = '';
  $('dl-srt').hidden = $('dl-vtt').hidden = true;
  const form = new FormData();
  form.append('file', file, file.name);
  form.append('response_format', 'verbose_json');
  const t0 = performance.now();
  try {
    lastTranscript = await api('/v1/audio/transcriptions', { method: 'POST', body: form });
    lastTranscript.name = file.name.replace(/\.[^.]+$/, '') || 'transcript';
    $('file-text').textContent = lastTranscript.text || '(no words)';
    show(
      $('file-status'),
      `${lastTranscript.duration.toFixed(1)} s of audio transcribed in ${Math.round(performance.now() - t0)} ms.`,
      'ok',
    );
    $('dl-srt').hidden = $('dl-vtt').hidden = false;
  } catch (err) {
    show($('file-status'), err.message, 'error');
  }
  refreshUsage();
}

$('file-input').addEventListener('change', () => {
  const file = $('file-input').files[0];
  if (file) transcribeFile(file);
  $('file-input').value = '';
});
const drop = $('drop');
drop.addEventListener('dragover', (ev) => {
  ev.preventDefault();
  drop.classList.add('over');
});
drop.addEventListener('dragleave', () => drop.classList.remove('over'));
drop.addEventListener('drop', (ev) => {
  ev.preventDefault();
  drop.classList.remove('over');
  const file = ev.dataTransfer.files[0];
  if (file) transcribeFile(file);
});
$('dl-srt').addEventListener('click', () =>
  download(`${lastTranscript.name}.srt`, captions(lastTranscript, 'srt'), 'application/x-subrip'),
);
$('dl-vtt').addEventListener('click', () =>
  download(`${lastTranscript.name}.vtt`, captions(lastTranscript, 'vtt'), 'text/vtt'),
);

// ---------------------------------------------------------------- batch

const FINAL = new Set(['complete', 'errored', 'terminated']);

function renderSteps(steps) {
  $('batch-steps').innerHTML = '';
  for (const s of steps) {
    const li = document.createElement('li');
    li.className = s.status;
    const took =
      s.started_at && s.ended_at
        ? ` ${((Date.parse(s.ended_at) - Date.parse(s.started_at)) / 1000).toFixed(1)} s`
        : '';
    li.textContent = `${s.name}: ${s.status}${took}${s.attempts > 1 ? ` (attempt ${s.attempts})` : ''}`;
    $('batch-steps').append(li);
  }
}

function renderArtifacts(job) {
  const list = $('batch-artifacts');
  list.innerHTML = '';
  const meta = job.output?.result?.metadata;
  const keys = ['result.json'];
  if (job.output?.review) keys.push('reviewed_result.json');
  for (let i = 0; i < (meta?.chunk_count ?? 0); i++) keys.push(`chunk_${i}.json`);
  for (const name of keys) {
    const key = `transcription/${job.request_id}/${name}`;
    const li = document.createElement('li');
    const a = Object.assign(document.createElement('a'), { href: `/r2/${key}`, textContent: name });
    // /r2 needs the key in a header: fetch it rather than navigate.
    a.addEventListener('click', async (ev) => {
      ev.preventDefault();
      try {
        $('artifact-view').textContent = JSON.stringify(await api(`/r2/${key}`), null, 2);
      } catch (err) {
        $('artifact-view').textContent = err.message;
      }
      $('artifact-view').hidden = false;
    });
    li.append(a);
    list.append(li);
  }
}

async function pollJob(id) {
  for (let delay = 500; ; delay = Math.min(delay * 1.5, 3000)) {
    let job;
    try {
      job = await api(`/v1/audio/transcriptions/jobs/${id}`);
    } catch (err) {
      if (err.status !== 429 && err.status < 500) return show($('batch-status'), err.message, 'error');
      show($('batch-status'), `${err.message}; retrying…`, 'error');
      await new Promise((r) => setTimeout(r, Number(err.retryAfter || 2) * 1000));
      continue;
    }
    renderSteps(job.steps || []);
    show(
      $('batch-status'),
      `Job ${id}: ${job.status}`,
      job.status === 'complete' ? 'ok' : job.status === 'errored' ? 'error' : '',
    );
    if (FINAL.has(job.status)) {
      if (job.status === 'complete') {
        const result = job.output.result;
        $('batch-text').textContent = result.segments.map((s) => s.text).join(' ') || '(no words)';
        renderArtifacts(job);
      } else if (job.error) {
        show(
          $('batch-status'),
          `Job ${id}: ${job.status}: ${job.error.message} (${job.error.name})`,
          'error',
        );
      }
      refreshUsage();
      return;
    }
    await new Promise((r) => setTimeout(r, delay));
  }
}

$('batch-form').addEventListener('submit', async (ev) => {
  ev.preventDefault();
  const button = document.querySelector('#batch-form button');
  button.disabled = true;
  $('batch-steps').innerHTML = $('batch-artifacts').innerHTML = '';
  $('batch-text').textContent = '';
  $('artifact-view').hidden = true;
  try {
    const accepted = await api('/v1/audio/transcriptions/jobs', {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ audio_url: $('batch-url').value.trim(), review: $('batch-review').checked }),
    });
    show($('batch-status'), `Job ${accepted.workflow_id}: ${accepted.status}`);
    await pollJob(accepted.workflow_id);
  } catch (err) {
    show($('batch-status'), err.message, 'error');
  } finally {
    button.disabled = false;
  }
});
