/** nccl-node/metrics: per-step training metrics, their Prometheus endpoint, JSON-lines logs and the run summary. */
export { TrainMetrics, type TrainMetricsOptions, type StepSample, type CheckpointSample } from './collector.js';
export { modelFlops, gpuPeakFlops, measureCpuPeak, mfu, PEAK_FLOPS, type ModelFlops, type PeakFlops, type Precision } from './flops.js';
export { collectiveTotals, collectiveBytes, type CollectiveTotals } from './collectives.js';
export { serveMetrics, trainRegistry, type TrainRegistry } from './prometheus.js';
export { summarize, rankSummary, runSummary, formatSummary, type RankSummary, type RunSummary } from './summary.js';
export { PHASES, type Phase, type StepMetrics, type StepRecord } from './types.js';
export { deviceMetrics, type DeviceMetrics } from './device.js';
export { LossHealth, LossHealthError, restoreBefore, scaleLearningRate, type LossHealthOptions, type HealthEvent, type HealthAction, type HealthKind, type Verdict } from './loss-health.js';
export { LossHistory, SpikeDetector, DivergenceDetector, zScore, relativeRise, type SpikeOptions, type DivergenceOptions } from './loss-detectors.js';
export { SdcSentinel, outvoted, replicaTensors, crc32cOf, type SdcOptions, type SdcEvent } from './sdc.js';
export { FaultInjector, corrupt, FAULT_SITES, type Fault, type FaultSite, type FiredFault } from './sdc-inject.js';
export type { StepProbe, StepContext } from './probe.js';
export { StragglerScores, stepLateness, formatVerdict, type StepReport, type StragglerOptions, type StragglerVerdict, type RankStraggler, type StragglerPattern } from './stragglers.js';
export { StragglerMonitor } from './straggler-monitor.js';
export { analyzeTraceDir, analyzeTraces, formatTraceAnalysis, type TraceAnalysis, type CommAnalysis, type Divergence } from './trace-analyze.js';
