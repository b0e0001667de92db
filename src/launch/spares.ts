/**
 * --spares N (with --restart-scope rank): N idle worker processes per node, started with
 * the training script like the ranks but told they are spares (NCCL_NODE_FT_SPARE=1,
 * NCCL_NODE_SPARE_INDEX=k). ElasticGroup.start() in a spare builds whatever the script
 * built before it, registers in the group's spare list and writes `ready`; the round
 * that comes up short after a rank is lost admits it in that rank's place (membership.ts
 * onShort), so no process start is on the recovery's critical path. Once admitted, the
 * spare works out which RANK it replaced (spareTakes), from then on announces itself and
 * heartbeats as that RANK, and writes `took`; its launcher adopts it as that rank and
 * starts a new spare in the background.
 *
 * Keys, in the attempt's store scope, per node and spare index:
 *   nccl-node/spare/<node>/<k>/ready   the spare is registered and waits to be admitted
 *   nccl-node/spare/<node>/<k>/took    JSON {rank, life, pid}: it took RANK's place
 *   nccl-node/spare/member/<id>        the same by group member id (the generation it was
 *                                      admitted to lists it with its negative spare RANK)
 */
import type { Member } from '../ft/membership.js';

/** Set to 1 in a spare worker (ElasticGroup.start joins as a spare). */
export const SPARE_ENV = 'NCCL_NODE_FT_SPARE';
/** The spare's index on its node (0, 1, ... in start order, replacements included). */
export const SPARE_INDEX_ENV = 'NCCL_NODE_SPARE_INDEX';

const base = (node: number, index: number): string => `nccl-node/spare/${node}/${index}/`;
export const spareReadyKey = (node: number, index: number): string => `${base(node, index)}ready`;
export const spareTookKey = (node: number, index: number): string => `${base(node, index)}took`;
/** The RANK a spare took, by its group member id: its round record still carries its spare id for that generation. */
export const memberTookKey = (memberId: string): string => `nccl-node/spare/member/${memberId}`;

export interface Took {
  rank: number;
  life: number;
  pid: number;
}

/**
 * The RANK (and its next life) whose place the spare `selfId` took in the generation of
 * `now`, formed from `prev`'s members: the lost members whose RANK did not come back
 * (by RANK order) are paired with the spares admitted (by new rank order). Spares carry
 * a negative RANK until then. Undefined when the spare has no lost member to pair with.
 */
export function spareTakes(prev: readonly Member[], now: readonly Member[], selfId: string): { rank: number; life: number } | undefined {
  const present = new Set(now.map((m) => m.id));
  const back = new Set(now.flatMap((m) => (m.founding !== undefined && m.founding >= 0 ? [m.founding] : [])));
  const lost = prev.filter((m) => !present.has(m.id) && m.founding !== undefined && m.founding >= 0 && !back.has(m.founding))
    .sort((a, b) => a.founding! - b.founding!);
  const spares = now.filter((m) => m.prevRank < 0 && (m.founding ?? -1) < 0).sort((a, b) => a.rank - b.rank);
  const i = spares.findIndex((m) => m.id === selfId);
  const m = i >= 0 ? lost[i] : undefined;
  return m === undefined ? undefined : { rank: m.founding!, life: (m.life ?? 0) + 1 };
}

/** One spare process as its launcher tracks it. */
export interface SpareProcess {
  index: number;
  pid: number | undefined;
  exited: () => boolean;
  /** It wrote `ready` (registered in the group's spare list). */
  ready: boolean;
  /** It took a RANK's place (the launcher adopted it as that rank). */
  took?: Took;
}

export interface SparePoolHooks {
  /** Starts spare `index` (the launcher's process spawning). */
  spawn(index: number): SpareProcess;
  /** Spare `s` took `took.rank`'s place. */
  took(s: SpareProcess, took: Took): void;
  log(line: string): void;
}

/**
 * This node's spares in one attempt: starts them, watches their `ready` and `took` keys,
 * and says how many are idle (ready, not taken, not promised to a lost rank yet).
 */
export class SparePool {
  readonly all: SpareProcess[] = [];
  private next = 0;
  /** Lost ranks counting on an idle spare, not taken yet. */
  private claimed = 0;

  constructor(
    private readonly view: { waitAll(keys: readonly string[], timeoutMs: number, signal?: AbortSignal): Promise<void>; read(key: string): Promise<string | undefined> },
    private readonly node: number,
    private readonly hooks: SparePoolHooks,
    private readonly signal: AbortSignal,
  ) {}

  /** Starts one more spare; `why` goes to the launcher's log. */
  start(why: string): void {
    const index = this.next++;
    const s = this.hooks.spawn(index);
    this.all.push(s);
    this.hooks.log(`starting spare s${index} (pid ${s.pid ?? 0}) ${why}`);
    void this.watch(s);
  }

  private async watch(s: SpareProcess): Promise<void> {
    try {
      await this.view.waitAll([spareReadyKey(this.node, s.index)], Infinity, this.signal);
      s.ready = true;
      await this.view.waitAll([spareTookKey(this.node, s.index)], Infinity, this.signal);
      const took = JSON.parse((await this.view.read(spareTookKey(this.node, s.index))) ?? 'null') as Took | null;
      if (took === null || this.signal.aborted) return;
      s.took = took;
      if (this.claimed > 0) this.claimed--;
      this.hooks.took(s, took);
    } catch {
      // The attempt ended (aborted) or the store is gone: the launcher's other watches report that.
    }
  }

  /** Idle spares not promised to a lost rank yet. */
  get idle(): number {
    return this.all.filter((s) => s.ready && s.took === undefined && !s.exited()).length - this.claimed;
  }

  /** Promises an idle spare to a lost rank; false when none is left. */
  claim(): boolean {
    if (this.idle <= 0) return false;
    this.claimed++;
    return true;
  }

  /** A promised spare did not come (the round closed without it): the rank restarts instead. */
  unclaim(): void {
    if (this.claimed > 0) this.claimed--;
  }

  /** Spares not taken (their processes are stopped with the attempt). */
  get waiting(): SpareProcess[] {
    return this.all.filter((s) => s.took === undefined);
  }
}
