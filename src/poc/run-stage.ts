/**
 * One gang's work: the rank program of `nccl-node poc` (src/poc/rank.ts) and of
 * `nccl-node poc stage <name>` under another launcher (torchrun, srun, mpirun,
 * `nccl-node run`). Every rank joins the job found in the environment, runs the
 * stage, and rank 0 writes its StageResult to DIR/stage-<name>.json.
 */
import { mkdir, writeFile } from 'node:fs/promises';
import type { Communicator } from '../comm/communicator.js';
import { init } from '../comm/init.js';
import { NcclNodeError } from '../errors.js';
import type { PocConfig } from './config.js';
import { connectivityStage } from './connectivity.js';
import { ensureData, modelConfig, paths } from './corpus.js';
import { finetuneStage } from './finetune.js';
import { pretrainStage } from './pretrain.js';
import { readStage, restoreStage } from './restore.js';
import type { StageResult } from './stage.js';

/** Stages that run as a gang of ranks; inference and canary run in the orchestrating process. */
export const GANG_STAGES = ['connectivity', 'pretrain', 'checkpoint', 'finetune'] as const;
export type GangStage = (typeof GANG_STAGES)[number];

async function finetune(comm: Communicator, cfg: PocConfig, out: string, log: (l: string) => void): Promise<StageResult> {
  const pre = (await readStage(out, 'pretrain'))?.metrics as { steps: number; checkpoints: { step: number; dir: string }[] } | undefined;
  const from = pre?.checkpoints.find((c) => c.step === pre.steps)?.dir;
  if (!from) throw new NcclNodeError('ERR_INVALID_ARGUMENT', `finetune: no final pretraining checkpoint recorded in ${paths(out).stage('pretrain')}`);
  const { vocab, problems } = await ensureData(comm, cfg, out);
  const f = cfg.finetune;
  return finetuneStage(comm, {
    from, ckptDir: paths(out).finetuneCkpt, model: modelConfig(cfg, vocab), vocab, problems,
    steps: f.steps, globalBatch: f.globalBatch, lr: f.lr, minAccuracy: f.minAccuracy, log,
  });
}

export async function runStage(name: string, o: { out: string; cfg: PocConfig; backend?: 'gloo' | 'nccl' | 'auto' }): Promise<StageResult> {
  if (!(GANG_STAGES as readonly string[]).includes(name)) {
    throw new NcclNodeError('ERR_INVALID_ARGUMENT', `poc stage: expected one of ${GANG_STAGES.join(', ')}, received ${name}`);
  }
  await mkdir(o.out, { recursive: true });
  const comm = await init({ backend: o.backend ?? 'auto' });
  const log = (l: string) => {
    if (comm.rank === 0) process.stdout.write(`[${name}] ${l}\n`);
  };
  try {
    const stage = name as GangStage;
    const result = stage === 'connectivity' ? await connectivityStage(comm, o.cfg)
      : stage === 'pretrain' ? await pretrainStage(comm, o.cfg, o.out, log)
        : stage === 'checkpoint' ? await restoreStage(comm, o.cfg, o.out, log)
          : await finetune(comm, o.cfg, o.out, log);
    if (comm.rank === 0) await writeFile(paths(o.out).stage(name), `${JSON.stringify({ ...result, worldSize: comm.size, backend: comm.backend }, null, 1)}\n`);
    // Rank 0 has written before any rank exits (the launcher stops the gang on the first exit code != 0).
    await comm.barrier();
    return result;
  } finally {
    await comm.destroy();
  }
}
