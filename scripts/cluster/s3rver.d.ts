/** The part of s3rver's API the cluster uses (the package ships no types). */
declare module 's3rver' {
  import type { AddressInfo } from 'node:net';
  export default class S3rver {
    constructor(opts: { address?: string; port?: number; silent?: boolean; directory: string });
    run(): Promise<AddressInfo>;
    close(): Promise<void>;
  }
}
