/**
 * OpenAI's Realtime protocol for transcription sessions (issue 25), spoken on
 * `WS /v1/realtime` over the same session machinery as the native stream: a
 * per-session adapter (a `SessionProtocol`) that turns OpenAI's client events
 * into the session's commands and the session's events into OpenAI's server
 * events. Both forms OpenAI published are understood: the current one
 * (`session.update` with `session.type: "transcription"` and `audio.input`)
 * and the beta one (`transcription_session.update` with `input_audio_format`);
 * each update is answered in the form it came in. Audio arrives at 24 kHz
 * (`audio/pcm`, `pcm16`) or 16 kHz (`audio/pcm` with `rate: 16000`) and is
 * resampled once to the 16 kHz the VAD and engines read; positions are
 * reported in ms of the client's audio. Field by field: README, "OpenAI
 * Realtime endpoint"; the reasons: docs/decisions.md.
 */
import { randomBytes } from 'node:crypto';
import {
  appendAudioBytes,
  fastAppend,
  parseAppend,
  parseJsonFrame,
  type ClientCommand,
  type SessionProtocol,
} from './protocol.js';
import {
  COMMIT_EMPTY,
  COMPLETED,
  type SessionCreated,
  type SessionEvent,
  type SessionUpdated,
} from './wire.js';
import {
  isOpenAIClientEvent,
  type BetaSession,
  type GaSession,
  type OpenAIServerEvent,
  type OpenAITranscription,
  type OpenAITurnDetection,
} from './openaiWire.js';
import { Resampler24To16 } from './resample.js';
import { OPENAI_ERROR_TYPES } from '../shared/http/openaiErrors.js';
import {
  openAIParam,
  readOpenAISession,
  type Form,
  type OpenAIChoices,
} from '../shared/sessionUpdate/openai.js';

export interface OpenAIConnect {
  /** `OpenAI-Beta: realtime=v1`: the session is announced as `transcription_session.created`. */
  beta: boolean;
  /** The `model` query of the SDK's connect (echoed as the transcription model until an update names one). */
  model?: string;
}

const invalid = (code: string, message: string): ClientCommand => ({ kind: 'invalid', code, message });

export class OpenAIProtocol implements SessionProtocol {
  private choices: OpenAIChoices;
  /** Choices of the update being applied, kept once the session accepts its settings. */
  private proposed: { choices: OpenAIChoices; form: Form } | null = null;
  private resampler: Resampler24To16 | null = new Resampler24To16();
  /** Turn detection on (the session's `vad` setting, from its events). */
  private vad = true;
  private readonly items = new Map<number, string>();
  private lastItem: string | null = null;
  private readonly idPrefix = randomBytes(6).toString('hex');
  private seq = 0;
  /** The client event being handled (OpenAI's errors name it). */
  private clientEventId: string | null = null;

  constructor(private readonly connect: OpenAIConnect) {
    this.choices = { rate: 24000, model: connect.model ?? null, noiseReduction: null, include: [] };
  }

  private id(kind: 'event' | 'item'): string {
    return `${kind}_${this.idPrefix}${(this.seq++).toString(36)}`;
  }

  // ---- client events ---------------------------------------------------------------------

  parseBinary(data: ArrayBuffer, maxFrameBytes: number): ClientCommand {
    // An extension: raw PCM16LE at the session's rate, as on the native stream.
    if (data.byteLength > maxFrameBytes) return { kind: 'tooLarge', size: data.byteLength };
    if (data.byteLength % 2 !== 0) {
      return invalid(
        'invalid_audio',
        'Audio frames must hold whole 16-bit samples (an even number of bytes).',
      );
    }
    return this.audio(Buffer.from(data));
  }

  parseAppendFrame(frame: Uint8Array, maxFrameBytes: number): ClientCommand | null {
    let pcm: Buffer | null;
    if (this.resampler) {
      // 24 kHz: decoded and resampled in one pass through the kernel's memory.
      const audio = appendAudioBytes(frame);
      pcm = audio && this.resampler.pushBase64(audio, maxFrameBytes);
    } else {
      pcm = fastAppend(frame, maxFrameBytes);
    }
    if (!pcm) return null;
    this.clientEventId = null;
    return { kind: 'audio', pcm };
  }

  parseText(text: string, maxFrameBytes: number): ClientCommand {
    this.clientEventId = null;
    // 24 kHz audio is copied by the resampler at once: it decodes into a scratch buffer.
    const transient = this.resampler !== null;
    const parsed = parseJsonFrame(text, maxFrameBytes, 'input_audio_buffer.append');
    if ('refused' in parsed) return parsed.refused;
    const m = parsed.msg;
    if (typeof m.event_id === 'string') this.clientEventId = m.event_id.slice(0, 128);
    if (!isOpenAIClientEvent(m))
      return invalid(
        'unknown_type',
        `Unsupported event type "${m.type.slice(0, 64)}": this endpoint serves transcription sessions ` +
          '(session.update, transcription_session.update, input_audio_buffer.append, .commit, .clear).',
      );
    switch (m.type) {
      case 'input_audio_buffer.append': {
        const cmd = parseAppend(m.audio, maxFrameBytes, transient);
        return cmd.kind === 'audio' ? this.audio(cmd.pcm) : cmd;
      }
      case 'input_audio_buffer.commit':
        return { kind: 'commit' };
      case 'input_audio_buffer.clear':
        return { kind: 'clear' };
      case 'session.update':
        return this.update(m.session, 'ga');
      case 'transcription_session.update':
        return this.update(m.session, 'beta');
    }
  }

  private audio(pcm: Buffer): ClientCommand {
    // The session copies each frame's audio at once: the resampler's output can be transient.
    return { kind: 'audio', pcm: this.resampler ? this.resampler.push(pcm, true) : pcm };
  }

  /** An update of either form as the native settings it changes; OpenAI-only choices wait for its acceptance. */
  private update(session: unknown, form: Form): ClientCommand {
    const read = readOpenAISession(session, form);
    if (!read.ok) return { kind: 'invalid', code: read.code, message: read.message, field: read.field };
    this.proposed = { choices: { ...this.choices, ...read.choices }, form };
    return { kind: 'update', msg: { type: 'session.update', ...read.native } };
  }

  // ---- server events ---------------------------------------------------------------------

  present(ev: SessionEvent): OpenAIServerEvent[] {
    const event_id = this.id('event');
    switch (ev.type) {
      case 'session.created':
        this.vad = ev.session.vad;
        return [this.announce('created', ev, this.connect.beta ? 'beta' : 'ga', event_id)];
      case 'session.updated': {
        const p = this.proposed;
        this.proposed = null;
        const form = p?.form ?? 'ga';
        if (p) {
          if (p.choices.rate !== this.choices.rate)
            this.resampler = p.choices.rate === 24000 ? new Resampler24To16() : null;
          this.choices = p.choices;
        }
        this.vad = ev.session.vad;
        return [this.announce('updated', ev, form, event_id)];
      }
      case 'input_audio_buffer.speech_started': {
        const item = this.id('item');
        this.items.set(ev.utterance_index, item);
        if (!this.vad) return [];
        return [{ type: ev.type, event_id, audio_start_ms: ev.audio_start_ms, item_id: item }];
      }
      case 'input_audio_buffer.speech_stopped': {
        const item = this.items.get(ev.utterance_index) ?? this.id('item');
        const out: OpenAIServerEvent[] = [];
        if (this.vad) out.push({ type: ev.type, event_id, audio_end_ms: ev.audio_end_ms, item_id: item });
        out.push({
          type: 'input_audio_buffer.committed',
          event_id: out.length ? this.id('event') : event_id,
          previous_item_id: this.lastItem,
          item_id: item,
          audio_start_ms: ev.audio_start_ms,
          audio_end_ms: ev.audio_end_ms,
        });
        this.lastItem = item;
        return out;
      }
      case COMPLETED: {
        const index = ev.utterance_index;
        const item = this.items.get(index) ?? this.id('item');
        this.items.delete(index);
        if (ev.error) {
          const e = ev.error;
          return [
            {
              type: 'conversation.item.input_audio_transcription.failed',
              event_id,
              item_id: item,
              content_index: 0,
              error: { type: OPENAI_ERROR_TYPES.server, code: e.code, message: e.message, param: null },
            },
          ];
        }
        const transcript = ev.text;
        return [
          {
            type: 'conversation.item.input_audio_transcription.delta',
            event_id,
            item_id: item,
            content_index: 0,
            delta: transcript,
          },
          {
            type: COMPLETED,
            event_id: this.id('event'),
            item_id: item,
            content_index: 0,
            transcript,
            usage: { type: 'duration', seconds: ev.audio_duration_ms / 1000 },
          },
        ];
      }
      case 'error':
        // A failed transcription is reported by its `...failed` event.
        if (ev.code === 'transcription_failed' && ev.utterance_index !== undefined) return [];
        return [this.error(event_id, ev.code, ev.message, ev.field)];
      case COMMIT_EMPTY:
        return [
          this.error(
            event_id,
            'input_audio_buffer_commit_empty',
            'Error committing input audio buffer: no speech was heard since the last turn.',
          ),
        ];
      default:
        // input_audio_buffer.cleared, service.throttled (an extension: audio dropped, docs/realtime.md).
        return [{ ...ev, event_id }];
    }
  }

  private error(event_id: string, code: string, message: string, field?: string): OpenAIServerEvent {
    const form = this.proposed?.form ?? 'ga';
    if (code === 'invalid_session_update') this.proposed = null;
    const param = field ? openAIParam(field, form) : null;
    return {
      type: 'error',
      event_id,
      error: {
        type: OPENAI_ERROR_TYPES.request,
        code,
        message,
        param,
        event_id: this.clientEventId,
      },
    };
  }

  /**
   * `session.<kind>`, or `transcription_session.<kind>` in the beta form, with the session object of
   * that form, from the effective settings of a native session event.
   */
  private announce(
    kind: 'created' | 'updated',
    ev: SessionCreated | SessionUpdated,
    form: Form,
    event_id: string,
  ): OpenAIServerEvent {
    const s = ev.session;
    const c = this.choices;
    const transcription: OpenAITranscription = {
      model: c.model,
      language: s.language === 'auto' ? null : s.language,
      prompt: s.prompt ?? '',
    };
    const turn: OpenAITurnDetection = !s.vad
      ? null
      : s.vad_eagerness
        ? { type: 'semantic_vad', eagerness: s.vad_eagerness }
        : {
            type: 'server_vad',
            threshold: s.vad_threshold,
            prefix_padding_ms: s.vad_prefix_ms,
            silence_duration_ms: s.vad_silence_ms,
          };
    const id = ev.session_id;
    if (form === 'beta') {
      const session: BetaSession = {
        id,
        object: 'realtime.transcription_session',
        input_audio_format: 'pcm16',
        input_audio_transcription: transcription,
        turn_detection: turn,
        input_audio_noise_reduction: c.noiseReduction,
        include: c.include,
        modalities: ['text'],
        client_secret: null,
      };
      return { type: `transcription_session.${kind}`, event_id, session };
    }
    const session: GaSession = {
      type: 'transcription',
      id,
      object: 'realtime.transcription_session',
      audio: {
        input: {
          format: { type: 'audio/pcm', rate: c.rate },
          transcription,
          noise_reduction: c.noiseReduction,
          turn_detection: turn,
        },
      },
      include: c.include,
    };
    return { type: `session.${kind}`, event_id, session };
  }
}
