/**
 * The event order of a cut inside speech (interface 3.3): when an utterance
 * is cut because it ran too long (`max_duration`, or the earlier
 * `target_duration` cut at a pause), speech goes on as the next utterance at
 * once, but its client hears "stopped and completed events for the old
 * segment, then `speech_started` for the new one". So the events of later
 * utterances wait here until the cut utterance's `completed` (a failed one
 * too: every stopped utterance gets one) has been sent, and follow it in the
 * order they came. Events of no utterance (session, errors of the client,
 * throttling) are never held.
 */
import { COMPLETED, type SessionEvent } from './wire.js';

const CUT_REASONS = new Set(['max_duration', 'target_duration']);

export class SplitOrder {
  /** The cut utterance whose `completed` the later ones wait for. */
  private waitingFor: number | null = null;
  private held: SessionEvent[] = [];

  /** The events to send now, in order, for `ev` (none while it is held). */
  pass(ev: SessionEvent): SessionEvent[] {
    const index = 'utterance_index' in ev ? ev.utterance_index : undefined;
    if (typeof index !== 'number') return [ev];
    if (this.waitingFor !== null && index > this.waitingFor) {
      this.held.push(ev);
      return [];
    }
    if (
      ev.type === 'input_audio_buffer.speech_stopped' &&
      CUT_REASONS.has(ev.reason) &&
      this.waitingFor === null
    )
      this.waitingFor = index;
    if (ev.type === COMPLETED && index === this.waitingFor) {
      this.waitingFor = null;
      const held = this.held;
      this.held = [];
      return [ev, ...held.flatMap((h) => this.pass(h))];
    }
    return [ev];
  }
}
