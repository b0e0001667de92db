/** Fault tolerance without restarting the world (docs/fault-tolerance.md). */
export { ElasticGroup, type ElasticGroupOptions } from './group.js';
export { membershipRound, orderMembers, type Member, type MemberInfo, type RoundOptions, type RoundResult } from './membership.js';
export { planSync, syncState, type LiveState, type SyncPlan, type SyncResult } from './transfer.js';
export { RecoveryLadder, EXIT_FULL_RESTART, faultOf, type Action, type Decision, type Fault, type LadderOptions } from './ladder.js';
export { trainElastic, exitCodeOf, modelRows, sampleRng, type ElasticTrainConfig, type ElasticResult, type StepRecord, type StepContext } from './elastic-train.js';
export { trainElasticHsdp, type ElasticHsdpConfig, type ElasticHsdpResult, type HsdpStepContext, type HsdpStepRecord } from './hsdp-train.js';
export { assignSlots, placeOf, planShardSync, type HsdpLayout, type HsdpShape, type ShardSyncPlan } from './hsdp-layout.js';
