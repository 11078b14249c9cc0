/**
 * The steps of a workflow run, in the order they run and a poll lists them.
 *
 * Each step's place is stored with its row (`batch_steps.seq`, the poll's
 * order): the values below are those rows' and never change, so a workflow
 * resumed by a newer version keeps its steps in order. The chunk steps take
 * the places after `transcribe_chunk` (`transcribe_chunk_{i}` at its place + i).
 */
export interface StepRef {
  readonly name: string;
  readonly seq: number;
}

/** In run order. */
export const STEP_ORDER = [
  ['probe', 1],
  ['slice', 2],
  ['transcribe_chunk', 100],
  ['aggregate', 1000],
  ['review', 1100],
  ['report', 1200],
  ['webhook', 10_000],
] as const;

type StepName = (typeof STEP_ORDER)[number][0];
const place = Object.fromEntries(STEP_ORDER) as Record<StepName, number>;
const step = (name: Exclude<StepName, 'transcribe_chunk'>): StepRef => ({ name, seq: place[name] });

export const STEPS = {
  probe: step('probe'),
  slice: step('slice'),
  aggregate: step('aggregate'),
  review: step('review'),
  report: step('report'),
  /** Waits from the end of the run until the webhook is delivered (webhook.ts). */
  webhook: step('webhook'),
} as const;

/** `transcribe_chunk_{index}`. */
export const chunkStep = (index: number): StepRef => ({
  name: `transcribe_chunk_${index}`,
  seq: place.transcribe_chunk + index,
});
