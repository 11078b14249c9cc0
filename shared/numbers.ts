/** Rounds to three decimals: seconds to the millisecond, and confidences, in responses, artifacts and bills. */
export function round3(x: number): number {
  return Math.round(x * 1000) / 1000;
}
