/**
 * Metered usage (billed audio seconds) per key: the usage ledger of
 * shared/usage/ (one code path for the segment, realtime and batch planes)
 * and the window accounting that plan limits read.
 */
export { UsageLedger } from './usage/ledger.js';
export { windowUsage, type Plane, type UsageUnit } from './usage/store.js';
