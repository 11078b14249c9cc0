/**
 * The client's address behind `hops` proxies that each append the address
 * they saw to X-Forwarded-For (TRUST_PROXY): the entry `hops` from the
 * right. Entries left of it are whatever the client sent. Without proxies
 * (or without the header) it is the socket's peer. The API gets the same
 * from Koa (`proxy` + `maxIpsCount`); the realtime tier reads it here.
 */
export function clientAddress(forwardedFor: string, socketAddress: string, hops: number): string {
  if (hops <= 0 || !forwardedFor) return socketAddress;
  const entries = forwardedFor
    .split(',')
    .map((e) => e.trim())
    .filter(Boolean);
  if (entries.length === 0) return socketAddress;
  return entries[Math.max(0, entries.length - hops)];
}
