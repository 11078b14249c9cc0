// The playground: plain browser JavaScript, no build step, no outside requests.
// The API key lives in `apiKey` only (never in storage or a URL); the realtime
// socket authenticates with a 60-second `rt_` session token minted with it.

import { initMic } from './mic.js';

const $ = (id) => document.getElementById(id);
let apiKey = '';

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

// ---------------------------------------------------------------- live microphone (mic.js)

initMic({ api, show, errorText, refreshUsage, hasKey: () => apiKey !== '' });

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
