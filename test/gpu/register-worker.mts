// One rank of test/gpu/register.test.ts: comm.register / registerHost on the NCCL
// stand-in (version set by NCCL_STANDIN_VERSION) or on Gloo. Prints RESULT <json>.
import { DeviceBuffer, PinnedHostBuffer, init, type Communicator } from '../../src/index.js';

const out: Record<string, unknown> = { rank: Number(process.env.RANK) };
const failures: string[] = [];
function attempt(what: string, f: () => unknown): unknown {
  try {
    const r = f();
    return r && typeof r === 'object' && 'kind' in r ? { kind: (r as { kind: string }).kind } : 'ok';
  } catch (err) {
    return { code: (err as { code?: string }).code, message: (err as Error).message };
  }
}

async function registered(comm: Communicator) {
  const a = await DeviceBuffer.from(new Float32Array([1, 2, 3, 4]));
  const reg = comm.register(a);
  if (reg.kind !== 'buffer' || !reg.registered || reg.byteLength !== 16) failures.push('register: wrong handle');
  await comm.allReduce(a);  // a registered buffer is an ordinary buffer to collectives
  const got = Array.from(await a.toHost() as Float32Array);
  if (JSON.stringify(got) !== JSON.stringify([1, 2, 3, 4].map((v) => v * comm.size))) failures.push(`allReduce got ${got}`);
  reg.deregister();
  reg.deregister();  // idempotent
  if (reg.registered) failures.push('still registered after deregister');
  const b = DeviceBuffer.alloc({ dtype: 'float32', length: 1024 });
  { using r = comm.register(b); if (!r.registered) failures.push('using: not registered'); }
  const w = DeviceBuffer.alloc({ dtype: 'float32', length: 1024, ncclMemAlloc: true });
  const win = comm.register(w, { symmetric: true });
  out.window = win.kind;
  win[Symbol.dispose]();
  const pinned = new PinnedHostBuffer(4096);
  const host = comm.registerHost(pinned);
  out.host = host.kind;
  host.deregister();
  pinned.dispose();
  out.unpinned = attempt('registerHost unpinned', () => comm.registerHost(pinned));
  out.notDevice = attempt('register host array', () => comm.register(new Float32Array(4) as never));
  const late = comm.register(b);
  await comm.destroy();
  late.deregister();  // the communicator already dropped it: no error
  out.afterDestroy = attempt('register after destroy', () => comm.register(b));
}

// Buffers disposed while registered: NCCL keeps mappings of a registered buffer, so the
// memory must outlive the registration (the stand-in refuses to deregister a range that
// was freed). Collectives on other buffers meanwhile stay exact.
async function disposedWhileRegistered(comm: Communicator) {
  const a = await DeviceBuffer.from(new Float32Array(1024).fill(comm.rank + 1));
  const reg = comm.register(a);
  a.dispose();
  const c = await DeviceBuffer.from(new Float32Array(1024).fill(comm.rank + 1));
  await comm.allReduce(c);
  const sum = (comm.size * (comm.size + 1)) / 2;
  const bad = (await c.toHost() as Float32Array).findIndex((v) => v !== sum);
  if (bad >= 0) failures.push(`allReduce beside a disposed registration: element ${bad} wrong`);
  out.deregister = attempt('deregister after dispose', () => reg.deregister());
  const w = DeviceBuffer.alloc({ dtype: 'float32', length: 1024, ncclMemAlloc: true });
  const win = comm.register(w, { symmetric: true });
  w.dispose();
  out.windowDeregister = attempt('window deregister after dispose', () => win.deregister());
  // Still registered when the communicator goes: destroy drops the registration, then the memory.
  const b = DeviceBuffer.alloc({ dtype: 'float32', length: 1024 });
  comm.register(b);
  b.dispose();
  await comm.destroy();
  out.destroyed = true;
}

async function main() {
  const backend = (process.env.BACKEND ?? 'nccl') as 'nccl' | 'gloo';
  const comm = await init({ backend, timeoutMs: 20000 });
  out.version = comm.backendVersion;
  if (process.env.SCENARIO === 'register') {
    await registered(comm);
  } else if (process.env.SCENARIO === 'disposed') {
    await disposedWhileRegistered(comm);
  } else {
    const b = DeviceBuffer.alloc({ dtype: 'float32', length: 1024, ncclMemAlloc: backend === 'nccl' && process.env.NCCL_STANDIN_VERSION !== '21806' });
    out.plain = attempt('register', () => comm.register(b));
    out.symmetric = attempt('register symmetric', () => comm.register(b, { symmetric: true }));
    out.host = attempt('registerHost', () => comm.registerHost(new PinnedHostBuffer(4096)));
    await comm.destroy();
  }
  out.failures = failures;
  console.log(`RESULT ${JSON.stringify(out)}`);
}

main().catch((err) => {
  console.log(`RESULT ${JSON.stringify({ fatal: { code: (err as { code?: string }).code, message: (err as Error).message, stack: (err as Error).stack } })}`);
  process.exit(1);
});
