/** Rounds to three decimals: seconds to the millisecond in responses and artifacts. */
export function round3(x: number): number {
  return Math.round(x * 1000) / 1000;
}
