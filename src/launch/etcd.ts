/**
 * The launchers' rendezvous in etcd (`--rdzv-backend etcd`), so that it outlives any
 * one node. Every key of a job lives under `/nccl-node/<run id>/`:
 *
 * - `alive/<launcher id>`: the launcher's heartbeat, under its lease (TTL
 *   `--rdzv-lease-ttl`, kept alive by the client). A launcher whose lease expires is out.
 * - `leader`: the id of the launcher that runs the rounds' Coordinator (rounds.ts),
 *   taken with a compare-and-swap (create revision 0) under its lease; when it goes,
 *   another launcher takes it.
 * - `nccl-node/rdzv/...`: arrivals and tickets (rounds.ts), each under the lease of the
 *   launcher it is for, and `closed`, under a lease of its own that ends an hour later.
 * - `store/<attempt>`: `{host, port}` of the attempt's store (round-store.ts), under the
 *   lease of the launcher hosting it.
 *
 * Nothing outlives the launchers but `closed`, for an hour. Each launcher mirrors the
 * prefix through one watch; waits and the Coordinator read the mirror.
 */
import { Etcd3, type Lease } from 'etcd3';

import { NcclNodeError } from '../errors.js';
import type { KeyView } from './keyview.js';
import { CLOSED_KEY, type RoundBackend } from './rounds.js';

export interface EtcdOptions {
  host: string;
  port: number;
  runId: string;
  /** Lease TTL, whole seconds (etcd's unit). */
  leaseTtlS: number;
  /** How long to try reaching etcd before giving up with ERR_STORE. */
  connectTimeoutMs: number;
  /** This launcher's id. */
  id: string;
}

/** How long the job's `closed` key stays for spares that come late. */
const CLOSED_TTL_S = 3600;

type Listener = (key: string, value: Uint8Array | undefined) => void;

function aborted(signal: AbortSignal): Error {
  return signal.reason instanceof Error ? signal.reason : new DOMException('aborted', 'AbortError');
}

export class EtcdRendezvous {
  /** Key -> value, as etcd has it (relative to the job's prefix). */
  private readonly mirror = new Map<string, Buffer>();
  private readonly listeners = new Set<Listener>();
  private lostWith: NcclNodeError | undefined;
  private readonly lostListeners = new Set<(err: NcclNodeError) => void>();
  private closing = false;
  private cancelWatch: () => Promise<void> = async () => {};

  private constructor(
    private readonly client: Etcd3,
    private readonly lease: Lease,
    readonly leaseId: string,
    readonly prefix: string,
    readonly endpoint: string,
    /** This launcher's id. */
    private readonly id: string,
  ) {}

  /** Reaches etcd, takes a lease, starts the mirror and announces this launcher. */
  static async connect(o: EtcdOptions): Promise<EtcdRendezvous> {
    const endpoint = `${o.host.includes(':') ? `[${o.host}]` : o.host}:${o.port}`;
    const client = new Etcd3({
      hosts: `http://${endpoint}`,
      dialTimeout: o.connectTimeoutMs,
      // Unary calls never wait longer than this; watches and keepalives are streams.
      defaultCallOptions: (ctx) => (ctx.isStream ? {} : { deadline: Date.now() + Math.max(o.connectTimeoutMs, 5_000) }),
    });
    const lease = client.lease(o.leaseTtlS, { autoKeepAlive: true });
    lease.on('lost', () => {}); // reported through onLost once connected
    let timer: NodeJS.Timeout | undefined;
    try {
      const deadline = new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`no answer within ${o.connectTimeoutMs} ms`)), o.connectTimeoutMs);
      });
      const leaseId = await Promise.race([lease.grant(), deadline]);
      const r = new EtcdRendezvous(client, lease, leaseId, `/nccl-node/${o.runId}/`, endpoint, o.id);
      await Promise.race([r.startMirror(), deadline]);
      lease.on('lost', (err) => r.lost(new NcclNodeError('ERR_STORE', `this node's etcd lease at ${endpoint} is gone (${err.message}); it is out of the job`)));
      await Promise.race([r.put(`alive/${o.id}`, o.id, leaseId), deadline]);
      return r;
    } catch (err) {
      lease.on('lost', () => {});
      client.close();
      throw new NcclNodeError('ERR_STORE', `cannot reach etcd at ${endpoint} (--rdzv-endpoint): ${(err as Error).message}`, { endpoint });
    } finally {
      clearTimeout(timer);
    }
  }

  private async startMirror(): Promise<void> {
    const all = await this.client.getAll().prefix(this.prefix).exec();
    const kvs = [...all.kvs].sort((a, b) => Number(a.create_revision) - Number(b.create_revision));
    for (const kv of kvs) this.mirror.set(kv.key.toString().slice(this.prefix.length), kv.value);
    const watcher = await this.client.watch().prefix(this.prefix).startRevision(String(Number(all.header.revision) + 1)).create();
    watcher.on('put', (kv) => this.apply(kv.key.toString().slice(this.prefix.length), kv.value));
    watcher.on('delete', (kv) => this.apply(kv.key.toString().slice(this.prefix.length), undefined));
    this.cancelWatch = () => watcher.cancel();
  }

  private apply(key: string, value: Buffer | undefined): void {
    if (value === undefined) this.mirror.delete(key);
    else this.mirror.set(key, value);
    for (const l of [...this.listeners]) l(key, value);
  }

  private lost(err: NcclNodeError): void {
    if (this.closing || this.lostWith !== undefined) return;
    this.lostWith = err;
    for (const l of [...this.lostListeners]) l(err);
  }

  /** Calls `listener` once when this launcher's lease is lost (at once if it is already). */
  onLost(listener: (err: NcclNodeError) => void): () => void {
    if (this.lostWith !== undefined) listener(this.lostWith);
    else this.lostListeners.add(listener);
    return () => this.lostListeners.delete(listener);
  }

  private async put(key: string, value: string, lease: string | undefined = this.leaseId): Promise<void> {
    try {
      const b = this.client.put(this.prefix + key).value(value);
      await (lease === undefined ? b : b.lease(lease));
    } catch (err) {
      if (lease === this.leaseId && /lease not found/i.test((err as Error).message)) {
        this.lost(new NcclNodeError('ERR_STORE', `this node's etcd lease at ${this.endpoint} is gone (expired or revoked); it is out of the job`));
        throw this.lostWith!;
      }
      throw new NcclNodeError('ERR_STORE', `etcd at ${this.endpoint}: could not write ${JSON.stringify(key)}: ${(err as Error).message}`, { key });
    }
  }

  has(key: string): boolean {
    return this.mirror.has(key);
  }

  /** Whether that launcher's heartbeat (its lease) is there. */
  alive(id: string): boolean {
    return this.mirror.has(`alive/${id}`);
  }

  /** Calls `listener` for every change from now on; with `replay`, first for every key there, oldest first. */
  subscribe(listener: Listener, replay = false): () => void {
    if (replay) for (const [k, v] of [...this.mirror]) listener(k, v);
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** Writes `key` unless it exists (a compare-and-swap on its create revision); true when written. */
  async putIfAbsent(key: string, value: string, lease: string | undefined): Promise<boolean> {
    try {
      const put = this.client.put(this.prefix + key).value(value);
      const res = await this.client.if(this.prefix + key, 'Create', '==', 0).then(lease === undefined ? put : put.lease(lease)).commit();
      return res.succeeded;
    } catch (err) {
      throw new NcclNodeError('ERR_STORE', `etcd at ${this.endpoint}: could not write ${JSON.stringify(key)}: ${(err as Error).message}`, { key });
    }
  }

  /** Writes the job's end for every launcher still waiting, under a lease that outlives them for an hour. */
  async close(closedKey: string, closed: string): Promise<void> {
    const lease = this.client.lease(CLOSED_TTL_S, { autoKeepAlive: false });
    lease.on('lost', () => {});
    const id = await lease.grant();
    await this.putIfAbsent(closedKey, closed, id);
  }

  /** Whenever nobody leads, tries to; calls `onLeader` once this launcher does. */
  campaign(onLeader: () => void): () => void {
    let leading = false;
    let trying = false;
    const attempt = async (): Promise<void> => {
      if (leading || trying || this.closing || this.lostWith !== undefined || this.mirror.has('leader')) return;
      trying = true;
      try {
        leading = await this.putIfAbsent('leader', this.id, this.leaseId);
      } catch {
        // Tried again at the next change.
      } finally {
        trying = false;
      }
      if (leading) onLeader();
    };
    const stop = this.subscribe((key) => {
      if (key === 'leader') void attempt();
    });
    void attempt();
    return stop;
  }

  /** The rendezvous keys as rounds.ts reads and writes them. */
  get view(): KeyView {
    return {
      has: async (key) => this.has(key),
      read: async (key) => this.mirror.get(key)?.toString('utf8'),
      write: (key, value) => this.put(key, value),
      waitAll: (keys, timeoutMs, signal) => this.waitAll(keys, timeoutMs, signal),
      close: async () => {},
    };
  }

  waitAll(keys: readonly string[], timeoutMs: number, signal?: AbortSignal): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      if (signal?.aborted) return reject(aborted(signal));
      if (this.lostWith !== undefined) return reject(this.lostWith);
      if (keys.every((k) => this.mirror.has(k))) return resolve();
      let timer: NodeJS.Timeout | undefined;
      const done = (err?: Error): void => {
        unsubscribe();
        unlost();
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        if (err) reject(err);
        else resolve();
      };
      const onAbort = (): void => done(aborted(signal as AbortSignal));
      const unsubscribe = this.subscribe(() => {
        if (keys.every((k) => this.mirror.has(k))) done();
      });
      const unlost = this.onLost((err) => done(err));
      if (Number.isFinite(timeoutMs)) {
        timer = setTimeout(() => done(new NcclNodeError('ERR_TIMEOUT', `timed out after ${timeoutMs} ms waiting for ${keys.length} key(s) in etcd`, { timeoutMs })), timeoutMs);
      }
      signal?.addEventListener('abort', onAbort, { once: true });
    });
  }

  /** The Coordinator's view of etcd: tickets go under the lease of the launcher they are for. */
  get backend(): RoundBackend {
    return {
      onSet: (listener) => this.subscribe((key, value) => {
        if (value !== undefined) listener(key, value);
      }, true),
      set: (key, value, owner) => {
        if (key === CLOSED_KEY) {
          this.close(key, value).catch(() => {});
          return;
        }
        this.put(key, value, owner?.lease ?? this.leaseId).catch(() => {
          // The launcher it was for is gone (its lease with it): the round goes on without it.
        });
      },
      has: (key) => this.has(key),
      alive: (m) => this.alive(m.id),
    };
  }

  /** Revokes the lease (its keys go with it) and closes the client. */
  async shutdown(): Promise<void> {
    if (this.closing) return;
    this.closing = true;
    this.listeners.clear();
    await Promise.race([
      Promise.allSettled([this.cancelWatch(), this.lostWith === undefined ? this.lease.revoke() : Promise.resolve()]),
      new Promise((r) => setTimeout(r, 2_000)),
    ]);
    this.client.close();
  }
}
