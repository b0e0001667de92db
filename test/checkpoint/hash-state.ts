/** SHA-256 of a state dict's pieces (sorted by name) and optimizer step: what must come back bit for bit. */
import { createHash } from 'node:crypto';
import type { CheckpointState } from '../../src/checkpoint/index.js';

export function hashState(tensors: CheckpointState['tensors'], optimizerStep: unknown): string {
  const h = createHash('sha256');
  for (const name of Object.keys(tensors).sort()) {
    const t = tensors[name]!;
    const d = t.data as Float32Array;
    h.update(`${name}@${t.offset}+${t.length ?? d.length};`);
    h.update(new Uint8Array(d.buffer, d.byteOffset, (t.length ?? d.length) * 4));
  }
  h.update(`optimizerStep=${String(optimizerStep)}`);
  return h.digest('hex');
}
