/**
 * The Prometheus side of the metrics: one prom-client Registry per process (never the
 * global one, so a library user's own registry stays theirs), labelled with the rank,
 * and a small HTTP server for it. Each rank serves its own registry on
 * port + LOCAL_RANK: Prometheus scrapes every rank, and a rank that stops answering
 * is visible as such (a rank-0 aggregate would hide it).
 * Every metric is written once per step by TrainMetrics; docs/metrics.md lists them.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import { NcclNodeError } from '../errors.js';

export function trainRegistry(labels: Record<string, string>) {
  const registry = new Registry();
  registry.setDefaultLabels(labels);
  const registers = [registry];
  const g = (name: string, help: string, labelNames: string[] = []) => new Gauge({ name, help, labelNames, registers });
  const c = (name: string, help: string, labelNames: string[] = []) => new Counter({ name, help, labelNames, registers });
  return {
    registry,
    step: g('nccl_node_step', 'Training steps completed (the step counter checkpoints record).'),
    loss: g('nccl_node_loss', 'Mean token loss of the last step over the global batch.'),
    gradNorm: g('nccl_node_grad_norm', 'Global gradient norm of the last step before clipping (NaN without clipping).'),
    tokens: c('nccl_node_tokens_total', 'Tokens this rank trained on.'),
    tokensPerSecond: g('nccl_node_tokens_per_second', "This rank's tokens of the last step over its step time."),
    flopsPerToken: g('nccl_node_model_flops_per_token', 'Model FLOPs of forward and backward per token (matmuls, 6 per weight).'),
    peakFlops: g('nccl_node_peak_flops', 'Peak FLOP/s of the device this rank computes on.', ['device', 'precision', 'source']),
    mfu: g('nccl_node_mfu_ratio', "Model FLOPs utilization of the last step: achieved model FLOP/s over the device's peak."),
    stepSeconds: g('nccl_node_step_seconds', 'Wall time of the last step on this rank.'),
    stepDuration: new Histogram({
      name: 'nccl_node_step_duration_seconds', help: 'Wall time of each step on this rank.', registers,
      buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
    }),
    phaseSeconds: g('nccl_node_step_phase_seconds', 'Time of the last step in each phase: data, compute, comm (exposed), checkpoint.', ['phase']),
    phaseTotal: c('nccl_node_phase_seconds_total', 'Time in each phase over all steps.', ['phase']),
    collCalls: c('nccl_node_collective_calls_total', 'Collective operations completed, by kind.', ['kind']),
    collBytes: c('nccl_node_collective_bytes_total', "Bytes of collective operations (nccl-tests' message size), by kind.", ['kind']),
    collSeconds: c('nccl_node_collective_seconds_total', 'Time collective operations ran, by kind.', ['kind']),
    collBandwidth: g('nccl_node_collective_bandwidth_bytes_per_second', 'Achieved algorithm bandwidth by kind: bytes over time, all operations so far.', ['kind']),
    rss: g('nccl_node_resident_memory_bytes', 'Resident set size of this process at the end of the last step.'),
    deviceMemory: g('nccl_node_device_memory_used_bytes', "Memory in use on this rank's GPU (NVML), where there is one."),
    runtimeMemory: g('nccl_node_runtime_memory_bytes', 'Bytes the runtime holds for parameters, gradients, optimizer state and transient buffers.', ['kind']),
    stragglerScore: g('nccl_node_straggler_score', "EWMA of this rank's lateness over the median step time: the share of a step the job waits for this rank."),
    stragglerLateness: g('nccl_node_straggler_lateness_seconds', "EWMA of how much later than the first rank this rank reached the step's collectives, per step."),
    stragglerWait: g('nccl_node_straggler_wait_seconds', "EWMA of this rank's waits in the step's collectives, per step."),
    stragglerLateSteps: g('nccl_node_straggler_late_steps', 'Steps of the recent window in which this rank was late.'),
    stragglerState: g('nccl_node_straggler_state', "1 for this rank's state, 0 for the others: chronic, intermittent, one-off (a straggler), victim (waits for one), ok.", ['state']),
    stragglerCulprit: g('nccl_node_straggler_culprit_rank', 'The rank the job steadily waits for (every rank reports the same), -1 when none.'),
    checkpoints: c('nccl_node_checkpoints_total', 'Checkpoints committed.'),
    ckptBytes: g('nccl_node_checkpoint_bytes', 'Size of the last committed checkpoint, all ranks together.'),
    ckptStall: g('nccl_node_checkpoint_save_call_seconds', 'What the last save() call blocked the loop for.'),
    ckptSnapshot: g('nccl_node_checkpoint_snapshot_seconds', 'From the last save() call to its snapshot being complete.'),
    ckptCommit: g('nccl_node_checkpoint_commit_seconds', 'Background time of the last checkpoint from snapshot to durable commit.'),
  };
}

export type TrainRegistry = ReturnType<typeof trainRegistry>;

/** Serves `registry` at GET /metrics on host:port (port 0: any free port). */
export async function serveMetrics(registry: Registry, port: number, host = '0.0.0.0'): Promise<{ server: Server; url: string; scrapes: () => number }> {
  if (!Number.isInteger(port) || port < 0 || port > 65535) {
    throw new NcclNodeError('ERR_INVALID_ARGUMENT', `metrics port must be an integer in 0..65535, received ${port}`);
  }
  let scrapes = 0;
  const server = createServer((req, res) => {
    if (req.method !== 'GET' || (req.url ?? '/').split('?')[0] !== '/metrics') {
      res.writeHead(404, { 'content-type': 'text/plain' }).end('GET /metrics\n');
      return;
    }
    scrapes++;
    registry.metrics().then(
      (text) => res.writeHead(200, { 'content-type': registry.contentType }).end(text),
      (err: Error) => res.writeHead(500, { 'content-type': 'text/plain' }).end(`${err.message}\n`),
    );
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', (err: NodeJS.ErrnoException) => reject(new NcclNodeError('ERR_UNAVAILABLE',
      `metrics endpoint: cannot listen on ${host}:${port} (${err.code ?? err.message})`)));
    server.listen(port, host, resolve);
  });
  server.unref(); // a finished run exits even if nobody closed the endpoint
  const addr = server.address() as AddressInfo;
  return { server, url: `http://${host === '0.0.0.0' ? '127.0.0.1' : host}:${addr.port}/metrics`, scrapes: () => scrapes };
}
