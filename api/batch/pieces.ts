/**
 * How one chunk of a batch job is cut into engine calls (docs/decisions/speech.md,
 * "Batch: a minimum piece length"): at its pauses, into pieces of at least
 * `utteranceMinSeconds`, continued to `utteranceJoinSeconds` through pauses
 * while the next phrase is the same voice and channel (shared/audio/channel.ts),
 * each at most `utteranceMaxSeconds`. Without `splitUtterances`, the chunk whole.
 */
import type { BatchConfig } from '../../shared/config/batch.js';
import { ChannelSignatures } from '../../shared/audio/channel.js';
import { energyEnvelope, splitUtterances, type Slice } from '../../shared/audio/slicing.js';
import { PCM_SAMPLE_RATE } from '../../shared/audio/pcm.js';

export type PieceConfig = Pick<
  BatchConfig,
  | 'splitUtterances'
  | 'utteranceMinPauseSeconds'
  | 'utteranceMaxSeconds'
  | 'utteranceMinSeconds'
  | 'utteranceJoinSeconds'
  | 'utteranceSameChannelDb'
>;

/** The pieces of a chunk's PCM16LE mono 16 kHz (seconds from its start). */
export async function utterancePieces(pcm: Buffer, config: PieceConfig): Promise<Slice[]> {
  const seconds = pcm.length / 2 / PCM_SAMPLE_RATE;
  if (!config.splitUtterances) return [{ index: 0, start: 0, end: seconds }];
  const joining = config.utteranceJoinSeconds > config.utteranceMinSeconds;
  const channel = joining ? await ChannelSignatures.of(pcm) : null;
  return splitUtterances(energyEnvelope(pcm), seconds, {
    minPauseSeconds: config.utteranceMinPauseSeconds,
    maxUtteranceSeconds: config.utteranceMaxSeconds,
    minUtteranceSeconds: config.utteranceMinSeconds,
    joinUtteranceSeconds: config.utteranceJoinSeconds,
    sameChannel: channel ? (a, b) => channel.same(a, b, config.utteranceSameChannelDb) : undefined,
  });
}
