/**
 * Reads Prometheus exposition text (what GET /metrics answers): the value of
 * one series, found by name and labels. Counters in a test process are
 * shared by every app it starts, so tests compare before and after.
 */
export function seriesValue(text: string, name: string, labels: Record<string, string> = {}): number {
  let total = 0;
  let found = false;
  for (const line of text.split('\n')) {
    if (line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$/.exec(line);
    if (!m || m[1] !== name) continue;
    const have = Object.fromEntries(
      [...(m[3] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)].map((x) => [x[1], x[2]]),
    );
    if (Object.entries(labels).every(([k, v]) => have[k] === v)) {
      total += Number(m[4]);
      found = true;
    }
  }
  return found ? total : 0;
}

/** Every label value that appears in the text (to check none carries tenant data). */
export function labelValues(text: string): string[] {
  return [...text.matchAll(/[a-zA-Z_][a-zA-Z0-9_]*="((?:[^"\\]|\\.)*)"/g)].map((m) => m[1]!);
}
