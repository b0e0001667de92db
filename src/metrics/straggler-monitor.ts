/**
 * StragglerMonitor: feeds StragglerScores (stragglers.ts) from a running job. Each rank
 * reads its communicator's flight record for the collectives of each step, and after
 * every step the ranks swap their step reports (allGatherObject) on a communicator of
 * their own, split from the watched one at create(): the swap runs on that
 * communicator's thread, in the background, without taking a place in the training
 * communicator's sequence or waiting on the training loop. Every rank scores the same
 * reports, so every rank holds the same verdict.
 */
import type { Communicator } from '../comm/communicator.js';
import type { FlightRecord } from '../comm/flight-record.js';
import { StragglerScores, type StepReport, type StragglerOptions, type StragglerVerdict } from './stragglers.js';

export class StragglerMonitor {
  readonly scores: StragglerScores;
  /** The verdicts after the last 256 scored steps, oldest first. */
  readonly history: StragglerVerdict[] = [];
  /** Why the swap stopped (a peer failed, the communicator went away), or null. */
  error: Error | null = null;
  #record: FlightRecord;
  #side: Communicator;
  #mark: number;
  #chain: Promise<void> = Promise.resolve();
  #listeners = new Set<(v: StragglerVerdict) => void>();

  private constructor(comm: Communicator, side: Communicator, options: StragglerOptions) {
    this.scores = new StragglerScores(options);
    this.#record = comm.flightRecord;
    this.#side = side;
    this.#mark = this.#record.nextId;
  }

  /** Collective on `comm` (every rank calls it at the same point): splits off the monitor's communicator. */
  static async create(comm: Communicator, options: StragglerOptions = {}): Promise<StragglerMonitor> {
    const side = await comm.split({ color: 0 });
    return new StragglerMonitor(comm, side!, options);
  }

  /** The newest verdict. */
  get verdict(): StragglerVerdict {
    return this.history.at(-1) ?? this.scores.verdict();
  }

  /** Called with each new verdict. */
  onVerdict(f: (v: StragglerVerdict) => void): void {
    this.#listeners.add(f);
  }

  /**
   * Step `step` ended after `seconds` on this rank: reports it with the collectives
   * completed since the previous step and starts the swap; does not wait for it.
   */
  endStep(step: number, seconds: number): void {
    const entries = this.#record.since(this.#mark);
    const open = entries.find((e) => e.endedUs === 0);
    // Operations finish in issue order: the completed ones are a prefix; the rest count next step.
    const done = open ? entries.filter((e) => e.id < open.id) : entries;
    this.#mark = open ? open.id : this.#record.nextId;
    const ops = done.filter((e) => e.seq >= 0 && e.state === 'completed').map((e): [number, number] => [e.seq, (e.endedUs - e.startedUs) / 1e6]);
    const report: StepReport = { step, seconds, ops };
    this.#chain = this.#chain.then(() => this.#swap(report));
  }

  async #swap(report: StepReport): Promise<void> {
    if (this.error) return;
    try {
      const all = await this.#side.allGatherObject(report);
      if (!this.scores.add(all)) return;
      const v = this.scores.verdict();
      this.history.push(v);
      if (this.history.length > 256) this.history.shift();
      for (const f of this.#listeners) f(v);
    } catch (err) {
      this.error = err instanceof Error ? err : new Error(String(err));
    }
  }

  /** Resolves once every step reported so far is scored. */
  async settle(): Promise<void> {
    await this.#chain;
  }

  /** Scores what is pending, then frees the monitor's communicator. */
  async close(): Promise<void> {
    await this.settle();
    await this.#side.destroy();
  }
}
