// One process of test/gpu/health.test.ts: NVML state is per process (nvmlInit once),
// so every config runs in its own. Prints RESULT <json>.
import { appendFileSync } from 'node:fs';
import { health, onXid, type XidEvent } from '../../src/gpu/health.js';

const scenario = process.env.SCENARIO ?? 'health';
const out = (r: unknown) => console.log(`RESULT ${JSON.stringify(r)}`);

async function main() {
  if (scenario === 'health') {
    out(await health());
    return;
  }
  const events: (XidEvent & { atMs: number })[] = [];
  const t0 = Date.now();
  const watch = onXid((e) => events.push({ ...e, atMs: Date.now() - t0 }));
  if (scenario === 'xid-unref') {
    // Never stopped: the process must still exit once main() returns.
    out({ devices: watch.devices });
    return;
  }
  // The config's timed event fires on its own; this one goes through the file.
  setTimeout(() => appendFileSync(process.env.XID_FILE!, '0 48\n'), 150);
  const deadline = Date.now() + 5000;
  while (events.length < 2 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
  const s0 = performance.now();
  watch.stop();
  const stopMs = performance.now() - s0;
  watch.stop();  // idempotent
  out({ devices: watch.devices, events, stopMs });
}

main().catch((err) => {
  out({ fatal: { code: (err as { code?: string }).code, message: (err as Error).message } });
});
