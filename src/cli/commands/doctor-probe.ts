/**
 * The child process of `nccl-node doctor`: loads the addon and the GPU libraries
 * (a broken driver library may crash or hang the process that loads it, so the
 * parent never does) and prints one line, PROBE <json>.
 */
import { gpuInfo } from '../../gpu/info.js';
import { health } from '../../gpu/health.js';

const out: Record<string, unknown> = {};
try {
  out.info = gpuInfo();
} catch (err) {
  out.infoError = { code: (err as { code?: string }).code, message: (err as Error).message };
}
if (out.info) {
  try {
    out.health = await health();
  } catch (err) {
    out.healthError = { code: (err as { code?: string }).code, message: (err as Error).message };
  }
}
process.stdout.write(`PROBE ${JSON.stringify(out)}\n`);
