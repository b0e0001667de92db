/**
 * One rank of an elastic NCCL group on the stand-in libraries: each step all-reduces
 * [founding rank + 1] in device memory; founding rank 2 SIGKILLs itself before step 2,
 * the survivors' all-reduce fails, the ladder says re-form, and the group continues on
 * a fresh NCCL communicator of the survivors.
 */
import { pino } from 'pino';
import { ElasticGroup } from '../../src/ft/group.js';
import { faultOf, RecoveryLadder } from '../../src/ft/ladder.js';
import { DeviceBuffer } from '../../src/gpu/device-buffer.js';
import { isNcclNodeError } from '../../src/errors.js';
import { report } from '../helpers/ranks.js';

const founding = Number(process.env.RANK);
const group = await ElasticGroup.start({ backend: 'nccl', windowMs: 800, timeoutMs: 15_000 });
const ladder = new RecoveryLadder({ logger: pino({ level: 'silent' }) });
report({ backend: group.comm.backend });
for (let step = 0; step < 5;) {
  if (founding === 2 && step === 2) process.kill(process.pid, 'SIGKILL');
  try {
    const buf = await DeviceBuffer.from(new Float32Array([founding + 1]));
    await group.comm.allReduce(buf, { op: 'sum' });
    const out = new Float32Array(1);
    await buf.copyTo(out);
    buf.dispose();
    report({ step, size: group.comm.size, gen: group.generation, sum: out[0] });
    step++;
  } catch (err) {
    const t0 = performance.now();
    const d = ladder.onFault(faultOf(err, 0, group.comm.state === 'ok'));
    report({ fault: isNcclNodeError(err) ? err.code : String(err), action: d.action });
    if (d.action !== 'reform') throw err;
    const before = group.comm.size;
    const round = await group.reform(step);
    report({ round: ladder.onRound(before, round.members.length).action, ms: performance.now() - t0 });
  }
}
await group.close();
