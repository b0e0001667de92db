/**
 * One rank of train3d: reports losses, norms, and its final parameters with their placement.
 * On Gloo with host arrays, or with device 'cuda' on NCCL (the stand-ins in CI), where
 * it also reports the largest device-to-host copy of any step's reduce, norm and
 * optimizer step (the stand-in libcuda's CUDA_STANDIN_DTOH_TRACE, one file per process).
 */
import { existsSync, readFileSync } from 'node:fs';
import { init } from '../../src/comm/init.js';
import { TPParam } from '../../src/models/gpt/tensor-parallel.js';
import { train3d, type Train3DConfig } from '../../src/train/train3d.js';
import { readPayload, writeResult } from '../helpers/ranks.js';

// `backend` overrides the one the device implies (to test the mismatch).
const { batches, backend = undefined, ...cfg } = readPayload<Omit<Train3DConfig, 'batch'> & { batches: number[][]; backend?: 'gloo' | 'nccl' }>();
const want = backend ?? (cfg.device === 'cuda' ? 'nccl' : 'gloo');
const comm = await init({ backend: want });
if (comm.backend !== want) throw new Error(`unexpected backend ${comm.backend}`);
const trace = process.env.CUDA_STANDIN_DTOH_TRACE ? `${process.env.CUDA_STANDIN_DTOH_TRACE}.${process.pid}` : null;
const copies = (): number[] => (trace && existsSync(trace) ? readFileSync(trace, 'utf8').split('\n').filter(Boolean).map(Number) : []);
let stepDtoHMax = trace ? 0 : null;
const traceStep = (): (() => void) => {
  const before = copies().length;
  return () => void (stepDtoHMax = Math.max(stepDtoHMax!, ...copies().slice(before)));
};
const r = await train3d(comm, { ...cfg, batch: (s) => Int32Array.from(batches[s]!), ...(trace ? { traceStep } : {}) });
const out = new Float32Array(r.params.reduce((a, p) => a + p.size, 0));
let o = 0;
for (const p of r.params) (out.set(p.data, o), (o += p.size));
writeResult({
  losses: r.losses, norms: r.gradNorms, stepDtoHMax, dtohMax: trace ? Math.max(0, ...copies()) : null, coords: r.mesh.coords, resident: r.residentParamElements, memory: r.memory,
  params: r.params.map((p) => ({ name: p.name, size: p.size, shard: p instanceof TPParam ? p.shard : null })),
}, out);
await comm.destroy();
