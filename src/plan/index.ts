/** Capacity planning (analytic) and failure simulation for large training runs. */
export { plan, type PlanResult } from './plan.js';
export { simulate, scaleOf, youngIntervalFor, type SimulateInput, type SimulateResult } from './simulate.js';
export { sweep, type SweepInput, type SweepResult, type SweepPoint } from './sweep.js';
export { sweepPaths, PATH_INTERVAL_FACTORS, type PathSweepInput, type PathSweepResult, type PathSweepPoint } from './sweep-paths.js';
export { RECOVERY_PATHS, type RecoveryPath } from './recovery-policy.js';
export { readRecoveryCosts, scaleBenchCosts, defaultRungCosts, RUNGS, PHASES, type BenchFile, type RecoveryCostsInput, type Rung, type Phases, type Scale, type ScaledCosts } from './ladder-costs.js';
export { GPUS, GPU_TYPES, type GpuSpec, type GpuType } from './hardware.js';
export { STATE_BYTES, layerActivationBytes, bubbleFraction, allReduceBytes, type Estimate, type Memory, type AxisComm } from './estimate.js';
export { youngInterval, dalyInterval, firstOrderEttr, LLAMA3_FAULTS, type FaultKind } from './reliability.js';
export { LLAMA3_GPU_MTBF_HOURS, type PlanInput, type Layout } from './schema.js';
export { formatPlan, formatSimulation, formatSweep, formatPathSweep } from './format.js';
export { calibrate, fitRing, measureAttention, measureDisk, measureMatmul, measureMemoryBandwidth, type CalibrateOptions } from './calibrate.js';
export { parseProfile, readProfile, profileSchema, PROFILE_KIND, type HardwareProfile, type Calibration } from './profile.js';
export { predict, paramCount, ringSeconds, type ExampleModel, type PredictInput, type Prediction } from './predict.js';
export { planPlots, sweepPlots, pathSweepPlots, writePlots, INTERVAL_FACTORS } from './plots.js';
export { formatProfile, formatPrediction } from './format.js';
