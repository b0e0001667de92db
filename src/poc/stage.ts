/**
 * What every POC stage returns: its gates (each a go/no-go decision with the number
 * measured and the bound), the metrics the report keeps, and its plots. The stages
 * run in order; the report is the concatenation of their results.
 */
import type { Gate, Plot } from './report.js';

export const STAGES = ['connectivity', 'pretrain', 'checkpoint', 'finetune', 'inference', 'canary', 'budget'] as const;
export type StageName = (typeof STAGES)[number];

export interface StageResult {
  stage: StageName;
  gates: Gate[];
  metrics: Record<string, unknown>;
  plots: Plot[];
  /** Wall time of the stage. */
  seconds: number;
}
