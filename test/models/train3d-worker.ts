/** One rank of train3d: reports losses, norms, and its final parameters with their placement. */
import { init } from '../../src/comm/init.js';
import { TPParam } from '../../src/models/gpt/tensor-parallel.js';
import { train3d, type Train3DConfig } from '../../src/train/train3d.js';
import { readPayload, writeResult } from '../helpers/ranks.js';

const { batches, ...cfg } = readPayload<Omit<Train3DConfig, 'batch'> & { batches: number[][] }>();
const comm = await init({ backend: 'gloo' });
const r = await train3d(comm, { ...cfg, batch: (s) => Int32Array.from(batches[s]!) });
const out = new Float32Array(r.params.reduce((a, p) => a + p.size, 0));
let o = 0;
for (const p of r.params) (out.set(p.data, o), (o += p.size));
writeResult({
  losses: r.losses, norms: r.gradNorms, coords: r.mesh.coords, resident: r.residentParamElements, memory: r.memory,
  params: r.params.map((p) => ({ name: p.name, size: p.size, shard: p instanceof TPParam ? p.shard : null })),
}, out);
await comm.destroy();
