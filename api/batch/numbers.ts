/** Rounded to the millisecond (three decimals): how the batch plane writes seconds and confidences. */
export const round3 = (x: number): number => Math.round(x * 1000) / 1000;
