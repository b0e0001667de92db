/**
 * One-rank native Gloo communicators on a store of their own, and the all-reduce
 * called on them straight through submit(): the call path without the TypeScript
 * layer (callpath-ab.ts, addon-ab.ts).
 */
import { DTYPE_CODE, REDUCE_OP_CODE } from '../../src/dtypes.js';
import { binding, OpKind, type NativeComm } from '../../src/native.js';
import { StoreServer } from '../../src/rendezvous/server.js';

export interface OneRankStore {
  /** A new 1-rank communicator; `prefix` keeps its store keys apart from the others'. */
  open(prefix: string): Promise<NativeComm>;
  close(): Promise<void>;
}

export async function oneRankStore(token: string): Promise<OneRankStore> {
  const server = await StoreServer.start({ host: '127.0.0.1', port: 0, token });
  return {
    open: (prefix) => binding().createGloo({
      rank: 0, size: 1, storeHost: '127.0.0.1', storePort: server.port, token, prefix, hostname: '127.0.0.1',
      timeoutMs: 30_000, checkAgreement: true,
    }),
    close: () => server.close(),
  };
}

/**
 * A float32 sum in place through the native communicator alone: its promise, or
 * undefined when it completed before submit() returned (await takes either).
 */
export function nativeAllReduce(comm: NativeComm, buf: Float32Array): Promise<unknown> | undefined {
  return comm.submit(OpKind.allReduce, DTYPE_CODE.float32, REDUCE_OP_CODE.sum, buf, buf, buf.length, -1, 30_000);
}
