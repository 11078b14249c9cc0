/** `session.update` options (interface 4.9) checked by the project's ajv: pure function, no server. */
import { expect } from 'chai';
import { applySessionUpdate, presentSettings, type SessionSettings } from '../../realtime/options.js';
import { MAX_SPEECH_MS_CAP, VAD_DEFAULTS } from '../../shared/config/realtime.js';

const base: SessionSettings = {
  ...VAD_DEFAULTS,
  language: 'auto',
  prompt: 'hello',
  backend: undefined,
  sttModel: undefined,
  normalizerModel: undefined,
  translateTo: undefined,
};
const caps = { maxSpeechMsCap: MAX_SPEECH_MS_CAP };
const update = (msg: Record<string, unknown>) =>
  applySessionUpdate(base, { type: 'session.update', ...msg }, caps);

describe('unit: session.update options', () => {
  it('applies camelCase and snake_case names, nested under `session` too, and strips unknown ones', () => {
    const r = update({ vad_threshold: 0.7, sttModel: 'm', session: { language: 'zh-cn' }, colour: 'red' });
    expect(r.ok).to.equal(true);
    if (!r.ok) return;
    expect(r.settings).to.include({ threshold: 0.7, sttModel: 'm', language: 'zh' });
    expect(r.ignored).to.deep.equal(['colour']);
    expect(r.languageChanged).to.equal(true);
  });

  it('refuses a `session` that is not an object, and control characters in a prompt (tabs and line breaks pass)', () => {
    for (const session of ['str', 7, null, [1]]) {
      const r = update({ session });
      expect(r.ok, JSON.stringify(session)).to.equal(false);
      if (!r.ok) expect([r.code, r.field]).to.deep.equal(['invalid_session_update', 'session']);
    }
    for (const prompt of ['a\u0000b', 'bell\u0007', 'lone \ud800']) {
      const r = update({ prompt });
      expect(r.ok, JSON.stringify(prompt)).to.equal(false);
      if (!r.ok) expect(r.field).to.equal('prompt');
    }
    for (const name of ['stt_model', 'backend', 'normalizer_model', 'translate_to']) {
      const r = update({ [name]: 'a\u0000b' });
      expect(r.ok, name).to.equal(false);
      if (!r.ok) expect(r.message).to.include('control');
    }
    const ok = update({ prompt: 'Kubernetes,\tGrafana\nשלום \u202b' });
    expect(ok.ok && ok.settings.prompt).to.equal('Kubernetes,\tGrafana\nשלום \u202b');
  });

  it('refuses names longer than 200 characters and Infinity (1e309) anywhere (issue 41)', () => {
    for (const name of ['backend', 'stt_model', 'normalizer_model', 'translate_to', 'language']) {
      const r = update({ [name]: 'x'.repeat(201) });
      expect(r.ok, name).to.equal(false);
    }
    expect(update({ backend: 'x'.repeat(200) }).ok).to.equal(true);
    expect(update({ vad_target_speech_ms: Infinity }).ok).to.equal(false);
  });

  it('a silence window the client sets is kept exactly: sentence-end pauses go off', () => {
    expect(base.sentenceEndSilenceMs, 'on by default').to.be.greaterThan(0);
    for (const msg of [
      { vad_silence_ms: 700 },
      { vadSilenceMs: 500 },
      { session: { vad_silence_ms: 300 } },
    ]) {
      const r = update(msg);
      expect(r.ok && r.settings.sentenceEndSilenceMs, JSON.stringify(msg)).to.equal(0);
    }
    for (const msg of [{ vad_silence_ms: null }, { vad_threshold: 0.6 }]) {
      const r = update(msg);
      expect(r.ok && r.settings.sentenceEndSilenceMs, JSON.stringify(msg)).to.equal(
        base.sentenceEndSilenceMs,
      );
    }
  });

  it('vad_eagerness: a level judges pauses with vad_silence_ms as the longest wait; null or a window alone is fixed', () => {
    expect(base.eagerness, 'opt-in: the window by default').to.equal(null);
    const high = update({ vad_eagerness: 'high' });
    expect(high.ok && [high.settings.eagerness, high.settings.silenceMs]).to.deep.equal(['high', 640]);
    const both = update({ vadEagerness: 'low', vad_silence_ms: 1000 });
    expect(both.ok && [both.settings.eagerness, both.settings.silenceMs]).to.deep.equal(['low', 1000]);
    const off = applySessionUpdate(
      (high.ok && high.settings) as SessionSettings,
      { vad_eagerness: null },
      caps,
    );
    // Back from a level: the default window with its sentence-end check.
    expect(
      off.ok && [off.settings.eagerness, off.settings.silenceMs, off.settings.sentenceEndSilenceMs],
    ).to.deep.equal([null, 300, base.sentenceEndSilenceMs]);
    expect(off.ok && presentSettings(off.settings).vad_eagerness).to.equal(null);
    const bad = update({ vad_eagerness: 'eager' });
    expect(bad.ok === false && bad.field).to.equal('vad_eagerness');
  });

  it('rejects a wrong type or an out-of-range number and names the field', () => {
    const cases: [Record<string, unknown>, string][] = [
      [{ vad: 'yes' }, 'session.update: vad must be a boolean'],
      [{ prompt: 3 }, 'session.update: prompt must be a string'],
      [{ vadSilenceMs: '500' }, 'session.update: vadSilenceMs must be a number'],
      [{ vad_threshold: 0.99 }, 'session.update: vad_threshold must be <= 0.95'],
      [{ vadPrefixMs: -1 }, 'session.update: vadPrefixMs must be >= 0'],
      [{ vad_max_speech_ms: 999 }, 'session.update: vad_max_speech_ms must be >= 1000'],
      [{ vadMaxSpeechMs: 90_000 }, 'session.update: vadMaxSpeechMs must be <= 60000'],
      [
        { language: 'klingon' },
        'session.update: language must be a language code such as "en", "zh-cn" or "auto"',
      ],
    ];
    for (const [msg, message] of cases) {
      expect(update(msg), JSON.stringify(msg)).to.deep.equal({
        ok: false,
        code: 'invalid_session_update',
        field: message.split(' ')[1],
        message,
      });
    }
  });

  it('counts the prompt in characters (an emoji is one), up to 2000', () => {
    const emoji = '😀'.repeat(2000);
    expect(update({ prompt: emoji }).ok).to.equal(true);
    const r = update({ prompt: emoji + 'x' });
    expect(r).to.include({ ok: false, field: 'prompt' });
  });

  it('null unsets a text option and leaves the others as they are', () => {
    const r = update({ prompt: null, vad: null, language: null });
    expect(r.ok).to.equal(true);
    if (r.ok) expect(r.settings).to.include({ prompt: undefined, vad: true, language: 'auto' });
  });

  it('does not take Object.prototype names for options', () => {
    const r = update({ constructor: 1, toString: 'x', translateTo: 'fr' });
    expect(r.ok && r.ignored).to.deep.equal(['constructor', 'toString', 'translateTo']);
  });
});

describe('unit: session.update language against the engine', () => {
  it('refuses a language the engine does not transcribe (as the segment endpoint does), keeps the rest', () => {
    const builtin = { ...caps, languages: ['en'] };
    const zh = applySessionUpdate(base, { type: 'session.update', language: 'zh' }, builtin);
    expect(zh).to.include({ ok: false, code: 'unsupported_language', field: 'language' });
    expect(!zh.ok && zh.message).to.include('supported: en');
    for (const ok of ['en', 'en-US', 'auto', ''])
      expect(applySessionUpdate(base, { type: 'session.update', language: ok }, builtin).ok, ok).to.equal(
        true,
      );
    // Remote workers take any language and say so themselves.
    const anyEngine = { ...caps, languages: ['*'] };
    expect(applySessionUpdate(base, { type: 'session.update', language: 'zh' }, anyEngine).ok).to.equal(true);
  });
});
