/**
 * Checkpoint and restore: a fresh gang (new processes) reads the pretraining
 * run's mid-run checkpoint and trains to the end. It must end bit-exact: the
 * SHA-256 of the full parameters and the losses after the restore point equal the
 * uninterrupted run's, and the loader (restored from the checkpoint's train state)
 * consumes the same sample ids. Throughput: the pretraining run's saves (bytes /
 * snapshot-to-commit time) and a timed sharded read of the checkpoint here
 * (every rank reads its ZeRO slice of every tensor, as a restore at this size does).
 */
import { readFile } from 'node:fs/promises';
import type { Communicator } from '../comm/communicator.js';
import { load, readManifest, type LoadTarget } from '../checkpoint/index.js';
import { arrayTypeOf, type DType } from '../dtypes.js';
import { NcclNodeError } from '../errors.js';
import { train } from '../train/index.js';
import type { PocConfig } from './config.js';
import { ensureData, globalIds, loaderData, paths, sha256Ids, sha256Params } from './corpus.js';
import { everyNth, pretrainConfig } from './pretrain.js';
import { gate } from './report.js';
import type { StageResult } from './stage.js';

interface PretrainMetrics {
  steps: number;
  midStep: number;
  losses: number[];
  paramsSha256: string;
  sampleIdsSha256: { afterMid: string };
  checkpoints: { step: number; dir: string; bytes: number; seconds: number; writeGBs: number; stallMs: number }[];
}

export async function readStage(out: string, name: string): Promise<{ metrics: Record<string, unknown> } | null> {
  try {
    return JSON.parse(await readFile(paths(out).stage(name), 'utf8')) as { metrics: Record<string, unknown> };
  } catch {
    return null;
  }
}

/** Every rank reads its even slice of every tensor; returns bytes read by all ranks and the slowest rank's seconds. */
async function timedRead(comm: Communicator, dir: string): Promise<{ bytes: number; seconds: number }> {
  const m = await readManifest(dir);
  const targets: Record<string, LoadTarget> = {};
  for (const [name, t] of Object.entries(m.tensors)) {
    const numel = t.globalShape.reduce((a, b) => a * b, 1);
    const shard = Math.ceil(numel / comm.size);
    const offset = Math.min(comm.rank * shard, numel);
    const length = Math.max(0, Math.min(shard, numel - offset));
    if (length === 0) continue;
    targets[name] = { data: new (arrayTypeOf(t.dtype as DType))(length), dtype: t.dtype as DType, offset };
  }
  await comm.barrier();
  const t0 = performance.now();
  const r = await load(dir, targets, { strict: true });
  const seconds = (performance.now() - t0) / 1000;
  const [bytes, slowest] = [await sum(comm, r.bytesRead, 'sum'), await sum(comm, seconds, 'max')];
  return { bytes, seconds: slowest };
}

/** A scalar reduced over the ranks, through an object exchange: it works on Gloo and on NCCL (whose collectives take device memory only). */
async function sum(comm: Communicator, v: number, op: 'sum' | 'max'): Promise<number> {
  const all = await comm.allGatherObject(v);
  return op === 'sum' ? all.reduce((a, b) => a + b, 0) : Math.max(...all);
}

export async function restoreStage(comm: Communicator, cfg: PocConfig, out: string, log: (l: string) => void): Promise<StageResult> {
  const t0 = performance.now();
  const pre = (await readStage(out, 'pretrain'))?.metrics as PretrainMetrics | undefined;
  if (!pre) throw new NcclNodeError('ERR_INVALID_ARGUMENT', `restore: ${paths(out).stage('pretrain')} is missing: run the pretrain stage first`);
  const midCkpt = pre.checkpoints.find((c) => c.step === pre.midStep);
  if (!midCkpt) throw new NcclNodeError('ERR_INVALID_ARGUMENT', `restore: the pretraining run has no checkpoint at step ${pre.midStep}`);
  const read = await timedRead(comm, midCkpt.dir);

  const { vocab } = await ensureData(comm, cfg, out);
  const data = await loaderData(comm, cfg, out, vocab);
  const tc = pretrainConfig(comm, cfg, vocab, data);
  // at: [] loads and writes nothing: the comparison is the continuation alone.
  const r = await train(comm, { ...tc, log: everyNth(log), ckpt: { dir: midCkpt.dir, from: midCkpt.dir, at: [] } });
  const ids = await globalIds(comm, data, r.start, tc.steps);
  await data.loader.close();
  const sha = sha256Params(r.params);
  const expected = pre.losses.slice(r.start);
  const lossesEqual = r.start === pre.midStep && expected.length === r.losses.length && expected.every((l, i) => Object.is(l, r.losses[i]));
  const firstDiff = r.losses.findIndex((l, i) => !Object.is(l, expected[i]));
  const idsSha = sha256Ids(ids);

  const write = pre.checkpoints.map((c) => c.writeGBs);
  const minWrite = Math.min(...write);
  // The checkpoint's bytes over the slowest rank's read, as the write side counts them.
  const readGBs = midCkpt.bytes / read.seconds / 1e9;
  const stage = 'checkpoint' as const;
  const bits = (ok: boolean) => (ok ? 1 : 0);
  return {
    stage,
    gates: [
      gate({ stage, name: 'restored run: final parameters bit-exact', measured: bits(sha === pre.paramsSha256), threshold: 1, kind: 'min', unit: 'bool', note: `sha256 ${sha.slice(0, 16)}... vs ${pre.paramsSha256.slice(0, 16)}...` }),
      gate({ stage, name: 'restored run: losses after the restore point identical', measured: bits(lossesEqual), threshold: 1, kind: 'min', unit: 'bool', note: lossesEqual ? `${r.losses.length} steps from step ${r.start}` : `first difference at step ${r.start + firstDiff}` }),
      gate({ stage, name: 'restored run: same sample ids', measured: bits(idsSha === pre.sampleIdsSha256.afterMid), threshold: 1, kind: 'min', unit: 'bool', note: `${ids.length} ids` }),
      gate({ stage, name: 'checkpoint write throughput (slowest save)', measured: minWrite, threshold: cfg.checkpoint.minWriteGBs, kind: 'min', unit: 'GB/s', note: 'production target 10 GB/s' }),
      gate({ stage, name: 'checkpoint read throughput', measured: readGBs, threshold: cfg.checkpoint.minReadGBs, kind: 'min', unit: 'GB/s', note: 'production target 10 GB/s' }),
    ],
    metrics: {
      restoredFrom: midCkpt.dir, start: r.start, steps: tc.steps, paramsSha256: sha, expectedSha256: pre.paramsSha256, lossesEqual,
      sampleIdsSha256: idsSha, saves: pre.checkpoints, read: { bytesRead: read.bytes, checkpointBytes: midCkpt.bytes, seconds: read.seconds, GBs: readGBs },
    },
    plots: [{
      id: 'ckpt-throughput', title: 'Checkpoint throughput (GB/s)',
      spec: { mark: 'bar', encoding: { x: { field: 'op', type: 'nominal', title: null }, y: { field: 'GBs', type: 'quantitative', title: 'GB/s' } } },
      rows: [...pre.checkpoints.map((c) => ({ op: `write step ${c.step}`, GBs: c.writeGBs })), { op: `read step ${pre.midStep}`, GBs: readGBs }],
    }],
    seconds: (performance.now() - t0) / 1000,
  };
}
