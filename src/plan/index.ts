/** Capacity planning (analytic) and failure simulation for large training runs. */
export { plan, type PlanResult } from './plan.js';
export { simulate, youngIntervalFor, type SimulateInput, type SimulateResult } from './simulate.js';
export { sweep, type SweepInput, type SweepResult, type SweepPoint } from './sweep.js';
export { GPUS, GPU_TYPES, type GpuSpec, type GpuType } from './hardware.js';
export { STATE_BYTES, layerActivationBytes, bubbleFraction, allReduceBytes, type Estimate, type Memory, type AxisComm } from './estimate.js';
export { youngInterval, dalyInterval, firstOrderEttr, LLAMA3_FAULTS, type FaultKind } from './reliability.js';
export { LLAMA3_GPU_MTBF_HOURS, type PlanInput, type Layout } from './schema.js';
export { formatPlan, formatSimulation, formatSweep } from './format.js';
export { calibrate, fitRing, measureAttention, measureDisk, measureMatmul, measureMemoryBandwidth, type CalibrateOptions } from './calibrate.js';
export { parseProfile, readProfile, profileSchema, PROFILE_KIND, type HardwareProfile, type Calibration } from './profile.js';
export { predict, paramCount, ringSeconds, type ExampleModel, type PredictInput, type Prediction } from './predict.js';
export { planPlots, sweepPlots, writePlots, INTERVAL_FACTORS } from './plots.js';
export { formatProfile, formatPrediction } from './format.js';
