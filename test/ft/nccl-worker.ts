/**
 * One rank of an elastic NCCL group on the stand-in libraries: each step all-reduces
 * [founding rank + 1] in device memory; founding rank 2 SIGKILLs itself before step 2,
 * the survivors' all-reduce fails, the ladder says re-form, and the group continues on
 * a 2-rank NCCL communicator of the survivors: shrunk from the broken one
 * (ncclCommShrink with NCCL_SHRINK_ABORT), or a fresh one where the library lacks it.
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
    const decision = ladder.onRound(before, round.members.length);
    const ms = performance.now() - t0;
    ladder.record(decision, ms, { generation: group.generation, size: group.comm.size, step, roundMs: round.ms, via: group.formation.via, commMs: group.formation.ms });
    const { via, commMs } = ladder.history.at(-1)!;
    report({ round: decision.action, ms, via, commMs, roundMs: round.ms, abort: group.formation.abort ?? null });
  }
}
await group.close();
