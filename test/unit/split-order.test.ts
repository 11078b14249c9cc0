/**
 * realtime/splitOrder.ts on its own: the order interface 3.3 gives at cuts inside speech, for chained
 * cuts and completions that come back out of order (the protocol test covers one real session).
 */
import { expect } from 'chai';
import { SplitOrder } from '../../realtime/splitOrder.js';
import { COMPLETED, type SessionEvent } from '../../realtime/wire.js';

const started = (i: number) =>
  ({ type: 'input_audio_buffer.speech_started', utterance_index: i, audio_start_ms: 0 }) as SessionEvent;
const stopped = (i: number, reason: string) =>
  ({
    type: 'input_audio_buffer.speech_stopped',
    utterance_index: i,
    reason,
    audio_start_ms: 0,
    audio_end_ms: 0,
  }) as SessionEvent;
const completed = (i: number) => ({ type: COMPLETED, utterance_index: i }) as unknown as SessionEvent;
const name = (e: SessionEvent) =>
  `${e.type.split('.').pop()}${'utterance_index' in e ? ` ${String(e.utterance_index)}` : ''}`;

function run(events: SessionEvent[]): string[] {
  const order = new SplitOrder();
  return events.flatMap((e) => order.pass(e)).map(name);
}

describe('realtime: event order at cuts inside speech', () => {
  it('holds the next utterance until the cut one completes, across chained cuts answered out of order', () => {
    expect(
      run([
        started(0),
        stopped(0, 'max_duration'),
        started(1),
        stopped(1, 'target_duration'),
        started(2),
        completed(1), // the second cut answers first
        { type: 'service.throttled' } as unknown as SessionEvent, // no utterance: never held
        stopped(2, 'end_of_speech'),
        completed(0),
        completed(2),
      ]),
    ).to.deep.equal([
      'speech_started 0',
      'speech_stopped 0',
      'throttled',
      'completed 0',
      'speech_started 1',
      'speech_stopped 1',
      'completed 1',
      'speech_started 2',
      'speech_stopped 2',
      'completed 2',
    ]);
  });

  it('holds nothing after an utterance that ended at a pause, and nothing is lost', () => {
    const events = [
      started(0),
      stopped(0, 'end_of_speech'),
      started(1),
      completed(0),
      stopped(1, 'flush'),
      completed(1),
    ];
    expect(run(events)).to.deep.equal(events.map(name));
  });
});
