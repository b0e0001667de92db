/** The checkpoint I/O surface of the addon; defined in native/contract.ts, re-exported for older imports. */
export type { IoBinding, IoMemory, IoWriteOptions, IoWriteResult } from '../native/contract.js';
