/**
 * The POC's spending: wall seconds x ranks accumulated after every stage (core-hours
 * on Gloo, GPU-hours on NCCL). Once the budget is crossed the remaining stages are
 * skipped and the budget gate fails with the verdict "budget exceeded".
 */
import { gate } from './report.js';
import type { StageResult } from './stage.js';

export const BUDGET_EXCEEDED = 'budget exceeded';

export class Budget {
  #seconds = 0;
  readonly spent: { stage: string; seconds: number; ranks: number; hours: number }[] = [];

  /** `unit`: core-hours (gloo) or GPU-hours (nccl). */
  constructor(readonly limitHours: number | null, readonly price: number, readonly unit: string) {}

  get hours(): number {
    return this.#seconds / 3600;
  }

  get exceeded(): boolean {
    return this.limitHours !== null && this.hours > this.limitHours;
  }

  add(stage: string, wallSeconds: number, ranks: number): void {
    this.#seconds += wallSeconds * ranks;
    this.spent.push({ stage, seconds: wallSeconds, ranks, hours: (wallSeconds * ranks) / 3600 });
  }

  result(): StageResult {
    const stage = 'budget' as const;
    const cost = this.hours * this.price;
    return {
      stage,
      gates: this.limitHours === null ? [] : [gate({
        stage, name: `${this.unit} within budget`, measured: this.hours, threshold: this.limitHours, kind: 'max', unit: this.unit,
        note: this.exceeded ? `${BUDGET_EXCEEDED}: remaining stages skipped` : `cost ${cost.toFixed(4)}`,
      })],
      metrics: { unit: this.unit, used: this.hours, limit: this.limitHours, price: this.price, cost, exceeded: this.exceeded, verdict: this.exceeded ? BUDGET_EXCEEDED : 'within budget', spent: this.spent },
      plots: [],
      seconds: 0,
    };
  }
}
