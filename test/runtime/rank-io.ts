/** The rank side of helpers.runRanks: payload in, JSON (and optional Float32 blob) out. */
import { writeFileSync } from 'node:fs';

export function readPayload<T>(): T {
  return JSON.parse(process.env.RUNTIME_TEST_PAYLOAD ?? '{}') as T;
}

export function writeResult(result: unknown, arrays?: Float32Array): void {
  const base = process.env.RUNTIME_TEST_OUT!;
  if (arrays) writeFileSync(`${base}.bin`, new Uint8Array(arrays.buffer, arrays.byteOffset, arrays.byteLength));
  writeFileSync(`${base}.json`, JSON.stringify(result));
}
