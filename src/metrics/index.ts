/** nccl-node/metrics: per-step training metrics, their Prometheus endpoint, JSON-lines logs and the run summary. */
export { TrainMetrics, type TrainMetricsOptions, type StepSample, type CheckpointSample } from './collector.js';
export { modelFlops, gpuPeakFlops, measureCpuPeak, mfu, PEAK_FLOPS, type ModelFlops, type PeakFlops, type Precision } from './flops.js';
export { collectiveTotals, collectiveBytes, type CollectiveTotals } from './collectives.js';
export { serveMetrics, trainRegistry, type TrainRegistry } from './prometheus.js';
export { summarize, rankSummary, runSummary, formatSummary, type RankSummary, type RunSummary } from './summary.js';
export { PHASES, type Phase, type StepMetrics, type StepRecord } from './types.js';
export { deviceMetrics, type DeviceMetrics } from './device.js';
export { StragglerScores, stepLateness, formatVerdict, type StepReport, type StragglerOptions, type StragglerVerdict, type RankStraggler, type StragglerPattern } from './stragglers.js';
export { StragglerMonitor } from './straggler-monitor.js';
export { analyzeTraceDir, analyzeTraces, formatTraceAnalysis, type TraceAnalysis, type CommAnalysis, type Divergence } from './trace-analyze.js';
