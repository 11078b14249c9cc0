/**
 * Readiness checks (/readyz): each a name and a probe. The API's composition
 * root (api/deps.ts) builds the list; the health route runs it.
 */
export interface ReadinessCheck {
  name: string;
  check: () => Promise<boolean>;
}

/** Runs every readiness check (or those `only` keeps) concurrently, each bounded in time. */
export async function runReadiness(
  checks: readonly ReadinessCheck[],
  only: (name: string) => boolean = () => true,
): Promise<{ ok: boolean; checks: Record<string, boolean> }> {
  const results = await Promise.all(
    checks
      .filter((c) => only(c.name))
      .map(async (c) => {
        const ok = await Promise.race([
          c.check().catch(() => false),
          new Promise<boolean>((r) => setTimeout(r, 2500, false).unref()),
        ]);
        return [c.name, ok] as const;
      }),
  );
  return { ok: results.every(([, ok]) => ok), checks: Object.fromEntries(results) };
}

/**
 * Realtime readiness (interface 4.2): ready when at least one realtime
 * instance answers its /readyz with 200. Cached for a second, so a burst of
 * probes costs one round of requests.
 */
export function realtimeReadiness(urls: string[]): () => Promise<boolean> {
  let cached: { at: number; ok: Promise<boolean> } | undefined;
  const probe = async (url: string) => {
    const res = await fetch(url, { signal: AbortSignal.timeout(1500) });
    await res.body?.cancel();
    if (!res.ok) throw new Error(`${url}: ${res.status}`);
    return true;
  };
  return () => {
    if (!cached || Date.now() - cached.at > 1000) {
      cached = { at: Date.now(), ok: Promise.any(urls.map(probe)).catch(() => false) };
    }
    return cached.ok;
  };
}
