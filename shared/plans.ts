/**
 * Plan catalog. `free` is fixed by the interface (section 8) and cannot be
 * overridden; `pro` is our seeded default; PLANS_JSON may change `pro` and
 * add plans (missing fields taken from `free`, unknown fields refused).
 */
export interface PlanLimits {
  maxConcurrentConnections: number;
  maxConcurrentUtterances: number;
  maxConnectionsPerMinute: number;
  maxRequestsPerMinute: number;
  maxAudioSecondsPerRequest: number;
  maxSessionSeconds: number;
  maxAudioSecondsPerSession: number;
  maxAudioSecondsPerWindow: number;
  idleTimeoutSeconds: number;
}

export const PLAN_LIMIT_FIELDS: (keyof PlanLimits)[] = [
  'maxConcurrentConnections',
  'maxConcurrentUtterances',
  'maxConnectionsPerMinute',
  'maxRequestsPerMinute',
  'maxAudioSecondsPerRequest',
  'maxSessionSeconds',
  'maxAudioSecondsPerSession',
  'maxAudioSecondsPerWindow',
  'idleTimeoutSeconds',
];

export const BUILTIN_PLANS: Record<string, PlanLimits> = {
  free: {
    maxConcurrentConnections: 1,
    maxConcurrentUtterances: 2,
    maxConnectionsPerMinute: 6,
    maxRequestsPerMinute: 12,
    maxAudioSecondsPerRequest: 900,
    maxSessionSeconds: 900,
    maxAudioSecondsPerSession: 900,
    maxAudioSecondsPerWindow: 3600,
    idleTimeoutSeconds: 60,
  },
  pro: {
    maxConcurrentConnections: 20,
    maxConcurrentUtterances: 4,
    maxConnectionsPerMinute: 120,
    maxRequestsPerMinute: 600,
    maxAudioSecondsPerRequest: 14_400,
    maxSessionSeconds: 14_400,
    maxAudioSecondsPerSession: 14_400,
    maxAudioSecondsPerWindow: 360_000,
    idleTimeoutSeconds: 120,
  },
};

export class PlanCatalog {
  private readonly plans: Map<string, PlanLimits>;

  constructor(overrides: Record<string, Partial<PlanLimits>> = {}) {
    this.plans = new Map(Object.entries(BUILTIN_PLANS).map(([k, v]) => [k, { ...v }]));
    for (const [name, partial] of Object.entries(overrides)) {
      if (name === 'free') {
        throw new Error(
          'PLANS_JSON: the "free" plan is fixed by the interface (section 8); define another plan instead',
        );
      }
      if (!/^[A-Za-z0-9_.-]{1,100}$/.test(name)) {
        throw new Error(`PLANS_JSON: plan name "${name}" must be 1-100 letters, digits, ".", "_" or "-"`);
      }
      if (partial === null || typeof partial !== 'object' || Array.isArray(partial)) {
        throw new Error(`PLANS_JSON: plan "${name}" must be an object of limits`);
      }
      const unknown = Object.keys(partial).filter((f) => !(PLAN_LIMIT_FIELDS as string[]).includes(f));
      if (unknown.length) {
        throw new Error(
          `PLANS_JSON: plan "${name}" has unknown field(s) ${unknown.join(', ')} (known: ${PLAN_LIMIT_FIELDS.join(', ')})`,
        );
      }
      const base = this.plans.get(name) ?? BUILTIN_PLANS.free;
      const merged = { ...base, ...partial };
      for (const f of PLAN_LIMIT_FIELDS) {
        if (!Number.isInteger(merged[f]) || merged[f] < 0) {
          throw new Error(`PLANS_JSON: plan "${name}" field ${f} must be a non-negative integer`);
        }
      }
      this.plans.set(name, merged);
    }
  }

  has(name: string): boolean {
    return this.plans.has(name);
  }

  limits(name: string): PlanLimits {
    const p = this.plans.get(name);
    if (!p) throw new Error(`unknown plan ${name}`);
    return p;
  }

  list(): { plan: string; limits: PlanLimits }[] {
    return [...this.plans.entries()].map(([plan, limits]) => ({ plan, limits }));
  }
}
