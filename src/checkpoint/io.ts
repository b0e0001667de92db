/** The addon's checkpoint I/O functions; their failures carry the caller's stack (settle). */
import { fromNative } from '../errors.js';
import { binding } from '../native.js';
import type { IoBinding } from '../native/contract.js';

export function io(): IoBinding {
  return binding();
}

export async function settle<T>(p: () => Promise<T>): Promise<T> {
  const site = new Error('checkpoint I/O');
  try {
    return await p();
  } catch (err) {
    throw fromNative(err, site);
  }
}

/**
 * Whether GPUDirect Storage is usable: libcufile (NCCL_NODE_LIBCUFILE, else libcufile.so.0)
 * loads and opens its driver, and, given `dir`, an O_DIRECT file there registers with it.
 */
export function gdsStatus(dir?: string): { available: boolean; library: string | null; reason: string } {
  return io().ioGdsStatus(dir);
}
