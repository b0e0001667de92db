/**
 * Rendezvous rounds: which launchers (nodes) form the gang of each attempt.
 *
 * Every launcher that is ready for an attempt writes an arrival,
 * `nccl-node/rdzv/arrive/<launcher id>/<n>` (its n-th arrival), and waits for its ticket
 * `nccl-node/rdzv/ticket/<id>/<n>` (its node rank and the gang's shape) or for the
 * job's end, `nccl-node/rdzv/closed`. The launcher that hosts the store runs the
 * Coordinator, which sees every SET in-process and decides the rounds:
 *
 * - A round opens with the job (elastic) or when an attempt failed and restarts remain.
 * - It closes when every member of the previous round that is still connected has come
 *   back, and MAX nodes are there or MIN are and the last call (`--rdzv-last-call`) has
 *   passed since MIN was reached. At the join timeout it closes with whoever came if
 *   that is at least MIN, and otherwise ends the job (ERR_TIMEOUT naming MIN and the count).
 * - Node ranks follow the order in which nodes first joined the job. Nodes beyond MAX,
 *   and nodes arriving while an attempt runs, wait as spares for the next round.
 * - An arrival whose launcher has no store connection any more is dropped: it died.
 *
 * With a fixed --nnodes N the same rounds re-form a failed job: the round needs the N
 * node ranks the launchers were given.
 *
 * The Coordinator reads and writes through a RoundBackend: the store a launcher hosts
 * (serverBackend), or etcd (etcd.ts), where whichever launcher holds the leader key runs
 * it. There a new coordinator may take over mid-job, so rounds open on demand: an
 * arrival names the attempt it asks for, and the tickets in etcd say which attempt
 * formed last and with whom.
 */
import { z } from 'zod';

import { scopeKeyPrefix } from '../rendezvous/scope.js';
import type { StoreServer } from '../rendezvous/server.js';
import { doneKey } from './join.js';
import type { KeyView } from './keyview.js';

/** What the Coordinator needs from where the rendezvous keys live. */
export interface RoundBackend {
  /** Calls `listener` for every key written from now on (etcd: first for every key already there, oldest first). */
  onSet(listener: (key: string, value: Uint8Array) => void): () => void;
  /** Writes a key; `owner` is the launcher it is for (etcd: the key lives as long as that launcher's lease). */
  set(key: string, value: string, owner?: Arrival): void;
  has(key: string): boolean;
  /** Whether that launcher is still there (store: its connections; etcd: its lease). */
  alive(member: { id: string; clientName: string }): boolean;
}

/** The backend of the store this launcher hosts. */
export function serverBackend(server: StoreServer): RoundBackend {
  return {
    onSet: (listener) => server.onSet(listener),
    set: (key, value) => server.set(key, value),
    has: (key) => server.has(key),
    alive: (m) => server.hasClient(m.clientName),
  };
}

const ROOT = 'nccl-node/rdzv/';
const ARRIVE_PREFIX = `${ROOT}arrive/`;
export const CLOSED_KEY = `${ROOT}closed`;
const TICKET_PREFIX = `${ROOT}ticket/`;
const arriveKey = (id: string, n: number): string => `${ARRIVE_PREFIX}${id}/${n}`;
const ticketKey = (id: string, n: number): string => `${TICKET_PREFIX}${id}/${n}`;

export const ArrivalSchema = z.object({
  id: z.string().regex(/^[\w-]+$/),
  /** The name its store connections authenticate with: how the coordinator sees it is alive. */
  clientName: z.string(),
  host: z.string(),
  nproc: z.number().int().positive(),
  /** Static rendezvous only: the node rank this launcher was given. */
  nodeRank: z.number().int().nonnegative().optional(),
  /** Rounds that open on demand (etcd): the attempt this launcher asks for (0, or its last attempt + 1). */
  attempt: z.number().int().nonnegative().optional(),
  /** etcd: the lease of this launcher, which its ticket is written under. */
  lease: z.string().optional(),
});
export type Arrival = z.infer<typeof ArrivalSchema>;

export const TicketSchema = z.object({
  attempt: z.number().int().nonnegative(),
  nodeRank: z.number().int().nonnegative(),
  nnodes: z.number().int().positive(),
  worldSize: z.number().int().positive(),
  /** RANK of this node's local rank 0. */
  rankOffset: z.number().int().nonnegative(),
  /** Per node rank: launcher id, host and nproc, for the coordinator's liveness checks and for messages. */
  members: z.array(z.object({ id: z.string(), clientName: z.string(), host: z.string(), nproc: z.number().int().positive() })),
});
export type Ticket = z.infer<typeof TicketSchema>;

export const ClosedSchema = z.object({
  exitCode: z.number().int().min(0).max(255),
  message: z.string(),
  /** An NcclNodeError code when the rendezvous itself failed. */
  code: z.string().optional(),
});
export type Closed = z.infer<typeof ClosedSchema>;

/**
 * Announces this launcher for the next round and waits for its ticket, or for the job
 * to end (`closed`). No deadline of its own: the coordinator always answers (a round
 * closes or fails within the join timeout, and the job's end writes `closed`), and a
 * lost store rejects with ERR_STORE.
 */
export async function joinRound(view: KeyView, arrival: Arrival, n: number, signal: AbortSignal): Promise<{ ticket: Ticket } | { closed: Closed }> {
  await view.write(arriveKey(arrival.id, n), JSON.stringify(ArrivalSchema.parse(arrival)));
  const stop = new AbortController();
  const both = AbortSignal.any([signal, stop.signal]);
  const wait = (key: string): Promise<string> => view.waitAll([key], Infinity, both).then(async () => (await view.read(key)) ?? '');
  try {
    const ticket = wait(ticketKey(arrival.id, n)).then((t) => ({ ticket: TicketSchema.parse(JSON.parse(t)) }));
    const closed = wait(CLOSED_KEY).then((c) => ({ closed: ClosedSchema.parse(JSON.parse(c)) }));
    // The loser of the race rejects with an AbortError once stopped; nobody needs it.
    ticket.catch(() => {});
    closed.catch(() => {});
    return await Promise.race([ticket, closed]);
  } finally {
    stop.abort();
  }
}

export interface CoordinatorOptions {
  /** Elastic: MIN..MAX nodes. Static: both N, and arrivals carry their node rank. */
  minNodes: number;
  maxNodes: number;
  static: boolean;
  lastCallMs: number;
  joinTimeoutMs: number;
  /** The hosting launcher's own id: always alive, it runs this code. */
  selfId: string;
  log: (msg: string) => void;
  /**
   * A member of the running attempt lost its store connection before its ranks all
   * finished. Without it the coordinator does not watch running attempts (etcd: every
   * launcher watches its own gang's leases).
   */
  onNodeLost?: (attempt: number, nodeRank: number, member: Ticket['members'][number]) => void;
  /** Rounds open when an arrival asks for the attempt after the last formed one, not through open(). */
  onDemand?: boolean;
}

interface Pending {
  arrival: Arrival;
  n: number;
}

const POLL_MS = 100;

export class Coordinator {
  private readonly pending = new Map<string, Pending>();
  /** Launcher id -> order of its first arrival in the job. */
  private readonly firstSeen = new Map<string, number>();
  private arrivals = 0;
  private forming: { attempt: number; deadline: number; minSince?: number; previous: string[] } | undefined;
  private running: { attempt: number; ticket: Ticket; reported: Set<string> } | undefined;
  private timer: NodeJS.Timeout | undefined;
  private closedWith: Closed | undefined;
  /** The last attempt a round formed for (on-demand rounds). */
  private lastFormed = -1;
  private readonly unsubscribe: () => void;

  constructor(private readonly server: RoundBackend, private readonly o: CoordinatorOptions) {
    this.unsubscribe = server.onSet((key, value) => {
      if (o.onDemand && this.observe(key, value)) return;
      if (!key.startsWith(ARRIVE_PREFIX)) return;
      const [id, nText] = key.slice(ARRIVE_PREFIX.length).split('/');
      const parsed = safeArrival(value);
      if (parsed === undefined || parsed.id !== id) {
        o.log(`ignored a malformed rendezvous arrival under ${JSON.stringify(key)}`);
        return;
      }
      if (!this.firstSeen.has(parsed.id)) this.firstSeen.set(parsed.id, this.arrivals);
      this.arrivals++;
      // A coordinator taking over (etcd) sees arrivals that were answered already.
      if (this.server.has(ticketKey(parsed.id, Number(nText)))) return;
      this.pending.set(parsed.id, { arrival: parsed, n: Number(nText) });
      this.evaluate();
      if (this.forming === undefined && this.closedWith === undefined && this.pending.has(parsed.id)) {
        o.log(`rendezvous: node ${parsed.host} (launcher ${parsed.id}) waits as a spare for the next round`);
      }
    });
    this.timer = setInterval(() => this.tick(), POLL_MS);
    this.timer.unref();
  }

  /** Opens the round of `attempt`; `previous` members who are still connected are waited for. */
  open(attempt: number): void {
    if (this.closedWith !== undefined || this.o.onDemand) return;
    const previous = this.lastMembers;
    this.running = undefined;
    this.forming = { attempt, deadline: Date.now() + this.o.joinTimeoutMs, previous };
    this.evaluate();
  }

  /** Ends the job for every launcher still waiting (spares included). */
  close(closed: Closed): void {
    if (this.closedWith !== undefined) return;
    this.closedWith = closed;
    this.forming = undefined;
    this.running = undefined;
    this.server.set(CLOSED_KEY, JSON.stringify(closed));
  }

  /** On-demand rounds: learns the last formed round and the job's end from keys others wrote. */
  private observe(key: string, value: Uint8Array): boolean {
    const text = Buffer.from(value).toString('utf8');
    if (key === CLOSED_KEY) {
      const c = ClosedSchema.safeParse(safeJson(text));
      if (c.success && this.closedWith === undefined) {
        this.closedWith = c.data;
        this.forming = undefined;
      }
      return true;
    }
    if (!key.startsWith(TICKET_PREFIX)) return false;
    const t = TicketSchema.safeParse(safeJson(text));
    if (t.success && t.data.attempt > this.lastFormed) {
      this.lastFormed = t.data.attempt;
      this.lastMembers = t.data.members.map((m) => m.id);
      for (const m of t.data.members) this.lastClientName.set(m.id, m.clientName);
    }
    return true;
  }

  stop(): void {
    clearInterval(this.timer);
    this.unsubscribe();
  }

  /** The attempt whose ranks run now ended; its members are no longer watched. */
  attemptEnded(): void {
    this.running = undefined;
  }

  private alive(a: Arrival): boolean {
    return a.id === this.o.selfId || this.server.alive(a);
  }

  private tick(): void {
    if (this.forming !== undefined || this.o.onDemand) this.evaluate();
    this.checkMembers();
  }

  /** Reports (onNodeLost) each member of the running attempt whose launcher lost its store connection before its ranks all finished. */
  checkMembers(): void {
    const run = this.running;
    const onNodeLost = this.o.onNodeLost;
    if (run === undefined || onNodeLost === undefined) return;
    run.ticket.members.forEach((m, nodeRank) => {
      if (m.id === this.o.selfId || run.reported.has(m.id) || this.server.alive(m)) return;
      if (this.finished(run.attempt, run.ticket, nodeRank)) return;
      run.reported.add(m.id);
      onNodeLost(run.attempt, nodeRank, m);
    });
  }

  /** Whether every rank of that node reported a clean exit (done keys, join.ts). */
  private finished(attempt: number, t: Ticket, nodeRank: number): boolean {
    const offset = t.members.slice(0, nodeRank).reduce((s, m) => s + m.nproc, 0);
    // The launcher reads attempt k's keys under that attempt's store scope (launcher.ts).
    const scope = attempt === 0 ? '' : scopeKeyPrefix(`attempt_${attempt}`);
    const nproc = t.members[nodeRank]?.nproc ?? 0;
    for (let r = offset; r < offset + nproc; r++) if (!this.server.has(scope + doneKey(r))) return false;
    return true;
  }

  private evaluate(): void {
    if (this.o.onDemand && this.forming === undefined && this.closedWith === undefined) {
      const next = this.lastFormed + 1;
      if ([...this.pending.values()].some((p) => (p.arrival.attempt ?? 0) >= next)) {
        this.forming = { attempt: next, deadline: Date.now() + this.o.joinTimeoutMs, previous: this.lastMembers };
      }
    }
    const f = this.forming;
    if (f === undefined) return;
    for (const [id, p] of this.pending) {
      if (!this.alive(p.arrival)) {
        this.pending.delete(id);
        this.o.log(`rendezvous: dropped node ${p.arrival.host} (launcher ${id}): its store connection is gone`);
      }
    }
    const now = Date.now();
    const order = (p: Pending): number => this.firstSeen.get(p.arrival.id) ?? Number.MAX_SAFE_INTEGER;
    const here = [...this.pending.values()].sort((a, b) => order(a) - order(b));
    if (this.o.static) {
      const byRank = new Map<number, Pending>();
      for (const p of here) if (p.arrival.nodeRank !== undefined && !byRank.has(p.arrival.nodeRank)) byRank.set(p.arrival.nodeRank, p);
      if (byRank.size >= this.o.maxNodes) {
        this.form(f.attempt, [...Array(this.o.maxNodes).keys()].map((r) => byRank.get(r)!));
      } else if (now >= f.deadline) {
        this.tooFew(f.attempt, byRank.size);
      }
      return;
    }
    // Members of the last round that are still connected come first (they joined the job
    // earlier); the hosting launcher is always one of them, so it never ends up a spare
    // that no longer sees the gang's failures.
    const outstanding = f.previous.filter((id) => !this.pending.has(id) && this.memberAlive(id));
    if (here.length >= this.o.maxNodes && (outstanding.length === 0 || now >= f.deadline)) {
      this.form(f.attempt, here.slice(0, this.o.maxNodes));
      return;
    }
    if (here.length >= this.o.minNodes) {
      f.minSince ??= now;
      if ((now - f.minSince >= this.o.lastCallMs && outstanding.length === 0) || now >= f.deadline) this.form(f.attempt, here.slice(0, this.o.maxNodes));
      return;
    }
    f.minSince = undefined;
    if (now >= f.deadline) this.tooFew(f.attempt, here.length);
  }

  private memberAlive(id: string): boolean {
    if (id === this.o.selfId) return true;
    const name = this.lastClientName.get(id);
    return name !== undefined && this.server.alive({ id, clientName: name });
  }

  private readonly lastClientName = new Map<string, string>();
  /** The ids of the last round's members: a re-form waits for those still connected. */
  private lastMembers: string[] = [];

  private form(attempt: number, chosen: Pending[]): void {
    this.forming = undefined;
    const members = chosen.map((p) => ({ id: p.arrival.id, clientName: p.arrival.clientName, host: p.arrival.host, nproc: p.arrival.nproc }));
    const worldSize = members.reduce((s, m) => s + m.nproc, 0);
    let offset = 0;
    let ticket: Ticket | undefined;
    chosen.forEach((p, nodeRank) => {
      ticket = { attempt, nodeRank, nnodes: members.length, worldSize, rankOffset: offset, members };
      offset += p.arrival.nproc;
      this.pending.delete(p.arrival.id);
      this.lastClientName.set(p.arrival.id, p.arrival.clientName);
      this.server.set(ticketKey(p.arrival.id, p.n), JSON.stringify(ticket), p.arrival);
    });
    this.lastMembers = members.map((m) => m.id);
    this.lastFormed = attempt;
    const spares = this.pending.size;
    this.o.log(`rendezvous: attempt ${attempt} formed with ${members.length} node(s) (${members.map((m) => m.host).join(', ')}), world size ${worldSize}` +
      (spares > 0 ? `; ${spares} spare node(s) wait for the next round` : ''));
    this.running = { attempt, ticket: ticket!, reported: new Set() };
  }

  private tooFew(attempt: number, came: number): void {
    const need = this.o.static ? `--nnodes ${this.o.maxNodes} needs all ${this.o.maxNodes}` : `--nnodes ${this.o.minNodes}:${this.o.maxNodes} needs at least ${this.o.minNodes}`;
    const message = `rendezvous for attempt ${attempt} failed: ${came} node(s) came within the join timeout of ${this.o.joinTimeoutMs / 1000} s; ${need}`;
    this.close({ exitCode: 1, message, code: 'ERR_TIMEOUT' });
  }
}

function safeJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

function safeArrival(value: Uint8Array): Arrival | undefined {
  try {
    const parsed = ArrivalSchema.safeParse(JSON.parse(Buffer.from(value).toString('utf8')));
    return parsed.success ? parsed.data : undefined;
  } catch {
    return undefined;
  }
}
