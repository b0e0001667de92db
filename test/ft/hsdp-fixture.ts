/** The elastic HSDP tests' reference: plain HSDP legs (test/ft/hsdp-ref-worker.ts). */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'vitest';
import { runRanks } from '../helpers/ranks.js';
import type { HsdpPayload } from './hsdp-worker.js';

/** Plain HSDP legs [{size, from, to}], each from the previous leg's saved shards; the last leg's full parameters. */
export async function hsdpReferenceChain(cfg: HsdpPayload['cfg'], legs: { size: number; from: number; to: number }[]) {
  const dir = mkdtempSync(join(tmpdir(), 'nccl-node-hsdp-ref-'));
  const ids = new Map<number, number[]>();
  let stateIn: string | undefined;
  let params: Float32Array | null = null;
  for (const [i, leg] of legs.entries()) {
    const stateOut = join(dir, `leg${i}`);
    const rs = await runRanks('test/ft/hsdp-ref-worker.ts', leg.size, { payload: { cfg, from: leg.from, to: leg.to, stateIn, stateOut }, check: true, timeoutMs: 40_000 });
    for (const r of rs) for (const rep of r.reports) ids.set(rep.step as number, [...(ids.get(rep.step as number) ?? []), ...(rep.ids as number[])]);
    for (const r of rs) expect(r.arrays).toEqual(rs[0]!.arrays);
    params = rs[0]!.arrays;
    stateIn = stateOut;
  }
  return { params: params!, ids };
}

