// One rank of a test/real test (spawned by init.test.ts): init() with the backend in
// BACKEND, then one line RESULT <json> with what happened and how long it took.
import { init } from '../../src/index.js';

const t0 = Date.now();
const warnings: string[] = [];
process.on('warning', (w) => warnings.push(`${(w as { code?: string }).code ?? w.name}: ${w.message}`));
let out: Record<string, unknown>;
try {
  const comm = await init({ backend: process.env.BACKEND as 'auto' | 'nccl' | 'gloo' });
  out = { ok: true, backend: comm.backend };
  await comm.destroy();
} catch (err) {
  out = { ok: false, code: (err as { code?: string }).code, message: (err as Error).message };
}
await new Promise((r) => setImmediate(r));  // let emitted warnings arrive
process.stdout.write(`RESULT ${JSON.stringify({ ...out, ms: Date.now() - t0, warnings })}\n`);
