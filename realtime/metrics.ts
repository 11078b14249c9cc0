/**
 * Metrics of a realtime instance, served at its `GET /metrics` beside the
 * process figures (event-loop lag, memory, CPU). Labels are bounded: refusal
 * codes and close reasons come from fixed tables; a close the client chose
 * is counted by its code class, never by the client's reason text.
 */
import { counter, gauge, histogram, LATENCY_BUCKETS } from '../shared/metrics/index.js';
import { CLOSE } from './session.js';

export const sessionsOpen = gauge('stt_realtime_sessions_open', 'Realtime sessions open on this instance.');
export const upgrades = counter(
  'stt_realtime_upgrades_total',
  'WebSocket upgrade attempts by outcome: accepted, or the refusal code (4.8).',
  ['outcome'],
);
export const sessionsClosed = counter(
  'stt_realtime_sessions_closed_total',
  'Realtime sessions ended, by close reason (server closes) or client_close.',
  ['reason'],
);
export const utterances = counter(
  'stt_realtime_utterances_total',
  'Utterances by outcome: completed, failed (a completed event with error), dropped (max_concurrent_utterances).',
  ['outcome'],
);
export const completionLatency = histogram(
  'stt_realtime_completion_latency_seconds',
  'speech_stopped to completed, per transcribed utterance (latency_ms).',
  LATENCY_BUCKETS,
);
export const gatewayOverhead = histogram(
  'stt_realtime_gateway_overhead_seconds',
  'Completion latency minus the speech engine call itself.',
  [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1],
);
export const audioSeconds = counter(
  'stt_realtime_audio_seconds_total',
  'Audio seconds received by sessions that ended (what is metered).',
);
export const breakerOpen = gauge(
  'stt_realtime_breaker_open',
  '1 while the circuit breaker over the speech upstream is open, else 0.',
);

const SERVER_REASONS: ReadonlySet<string> = new Set(Object.values(CLOSE).map(([, reason]) => reason));

/** A bounded label for how a session ended. */
export function closeLabel(code: number, reason: string): string {
  if (reason && SERVER_REASONS.has(reason)) return reason;
  return code === 1000 && !reason ? 'normal' : 'client_close';
}
