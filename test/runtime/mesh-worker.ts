/** One rank of the mesh layout test: reports who is in each of its groups, and the errors of bad meshes. */
import { init } from '../../src/comm/init.js';
import { DeviceMesh, MESH_DIMS } from '../../src/runtime/mesh.js';
import { readPayload, writeResult } from '../helpers/ranks.js';

const { dims } = readPayload<{ dims: Record<string, number> }>();
const comm = await init();
const errors: Record<string, string> = {};
for (const [name, bad] of Object.entries({ spansNodes: { tp: comm.size }, wrongProduct: { dp: comm.size + 1 } })) {
  try {
    await DeviceMesh.create(comm, bad);
  } catch (e) {
    errors[name] = (e as { code: string }).code;
  }
}
const mesh = await DeviceMesh.create(comm, dims);
const all = await mesh.flatten(['replicate', 'dp'], 'dpAll');
const groups: Record<string, number[]> = {};
for (const name of [...MESH_DIMS, 'dpAll']) {
  const g = name === 'dpAll' ? all : mesh.get(name);
  const out = new Int32Array(g.size);
  await g.allGather(new Int32Array([comm.rank]), out);
  groups[name] = [...out];
}
writeResult({ rank: comm.rank, coords: mesh.coords, groups, errors });
await comm.destroy();
