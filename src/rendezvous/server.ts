/**
 * The job's rendezvous key-value store (protocol: docs/rendezvous.md). The
 * launcher hosts it; without a launcher rank 0 does. One event loop serves every
 * connection: blocking GET/WAIT only park a waiter, they never block the loop.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import net from 'node:net';

import { NcclNodeError } from '../errors.js';
import { claimedScope, scopeKeyPrefix } from './scope.js';
import {
  DEFAULT_TIMEOUT_MS,
  FrameParser,
  FrameTooLargeError,
  MAX_BODY_BYTES,
  MAX_PREAUTH_BODY_BYTES,
  Op,
  Status,
  decodeRequest,
  describeKeys,
  encodeReply,
  inI64Range,
  opName,
  type FrameWriter,
  type Request,
} from './protocol.js';

export interface StoreServerOptions {
  /** Interface to listen on; default: all interfaces (Node's default). */
  host?: string;
  /** 0 picks a free port; read it back from `.port`. */
  port: number;
  /** The job token every client must present first. */
  token: string;
  /** Where refusals go; default console.error with a "nccl-node store:" prefix. */
  log?: (msg: string) => void;
  /**
   * Refusals are logged one per line up to a few per period; the rest are counted and
   * summarised per address at the end of the period. Default 10 s.
   */
  refusalLogPeriodMs?: number;
}

export type SetListener = (key: string, value: Uint8Array) => void;

/** A peer must authenticate this soon after connecting, so idle strangers don't hold sockets. */
const AUTH_DEADLINE_MS = 10_000;
/** How long close() lets a socket flush its last replies before destroying it. */
const CLOSE_GRACE_MS = 2_000;
/** setTimeout's ceiling; the wire allows u32 milliseconds (~49 days). */
const MAX_TIMER_MS = 2 ** 31 - 1;
/** Refusals logged one per line in each period before the rest are only counted. */
const REFUSALS_LOGGED_PER_PERIOD = 3;
/** At most this many addresses get a summary line of their own per period. */
const SUMMARISED_ADDRESSES = 3;

/**
 * Keeps the log of refused connections bounded under a flood (a port scanner, a
 * misconfigured job): a few lines per period, then one summary per address.
 */
class RefusalLog {
  private logged = 0;
  private readonly counts = new Map<string, number>();
  private timer: NodeJS.Timeout | undefined;
  private periodStart = Date.now();

  constructor(private readonly log: (msg: string) => void, private readonly periodMs: number) {}

  refused(address: string, line: string): void {
    if (this.timer === undefined) {
      this.periodStart = Date.now();
      this.timer = setTimeout(() => this.flush(), this.periodMs);
      this.timer.unref();
    }
    if (this.logged < REFUSALS_LOGGED_PER_PERIOD) {
      this.logged++;
      this.log(line);
      return;
    }
    this.counts.set(address, (this.counts.get(address) ?? 0) + 1);
  }

  /** Writes the summary of the period so far and starts a new one. */
  flush(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    this.logged = 0;
    const seconds = Number(((Date.now() - this.periodStart) / 1000).toFixed(1));
    const byCount = [...this.counts].sort((a, b) => b[1] - a[1]);
    this.counts.clear();
    const plural = (n: number): string => `${n} more unauthenticated connection${n === 1 ? '' : 's'}`;
    for (const [address, n] of byCount.slice(0, SUMMARISED_ADDRESSES)) {
      this.log(`refused ${plural(n)} from ${address} in the last ${seconds} s`);
    }
    const rest = byCount.slice(SUMMARISED_ADDRESSES);
    if (rest.length > 0) {
      const n = rest.reduce((sum, [, c]) => sum + c, 0);
      this.log(`refused ${plural(n)} from ${rest.length} other addresses in the last ${seconds} s`);
    }
  }
}

type Reply = (frame: Buffer) => void;

interface Waiter {
  keys: string[];
  conn: Connection;
  reply: Reply;
  /** Builds the OK reply at the moment the last key appears. */
  ready: () => Buffer;
  timer: NodeJS.Timeout;
}

/** Per-socket state. Requests run as they arrive; replies leave in request order. */
class Connection {
  authenticated = false;
  clientName = '';
  /** Prefix of every key this connection touches: '' for the job token, a scope's for a scoped token. */
  scope = '';
  /** Set once the socket is being shut down; later frames are ignored. */
  done = false;
  readonly parser = new FrameParser(MAX_PREAUTH_BODY_BYTES);
  readonly waiters = new Set<Waiter>();
  private readonly slots: Array<{ frame?: Buffer }> = [];

  constructor(readonly socket: net.Socket, readonly peer: string) {}

  /** Reserves the next place in the reply order; call the result once with the frame. */
  reserve(): Reply {
    const slot: { frame?: Buffer } = {};
    this.slots.push(slot);
    return (frame) => {
      slot.frame = frame;
      this.flush();
    };
  }

  /** Ends the socket after queued replies are written; destroys it if that stalls. */
  shutdown(): void {
    if (this.socket.writableEnded) return;
    this.done = true;
    const timer = setTimeout(() => this.socket.destroy(), CLOSE_GRACE_MS);
    timer.unref();
    this.socket.end(() => {
      clearTimeout(timer);
      this.socket.destroy();
    });
  }

  private flush(): void {
    for (let head = this.slots[0]; head?.frame !== undefined; head = this.slots[0]) {
      this.slots.shift();
      if (!this.socket.writableEnded) this.socket.write(head.frame);
    }
  }
}

export class StoreServer {
  private readonly data = new Map<string, Buffer>();
  /** key -> waiters that need it; a waiter appears under each of its keys. */
  private readonly waitersByKey = new Map<string, Set<Waiter>>();
  private readonly conns = new Set<Connection>();
  private readonly listeners = new Set<SetListener>();
  private readonly tokenDigest: Buffer;
  private readonly token: string;
  private readonly log: (msg: string) => void;
  private readonly refusals: RefusalLog;
  private closing: Promise<void> | undefined;
  private address!: net.AddressInfo;

  private constructor(private readonly server: net.Server, token: string, log?: (msg: string) => void, refusalLogPeriodMs = 10_000) {
    this.token = token;
    this.tokenDigest = digest(Buffer.from(token, 'utf8'));
    this.log = log ?? ((msg) => console.error(`nccl-node store: ${msg}`));
    this.refusals = new RefusalLog(this.log, refusalLogPeriodMs);
    server.on('connection', (socket) => this.accept(socket));
  }

  static async start(options: StoreServerOptions): Promise<StoreServer> {
    const { host, port, token, log, refusalLogPeriodMs } = options;
    if (typeof token !== 'string' || token.length === 0) {
      throw new NcclNodeError('ERR_INVALID_ARGUMENT', 'StoreServer.start: token must be a non-empty string');
    }
    if (!Number.isInteger(port) || port < 0 || port > 65535) {
      throw new NcclNodeError('ERR_INVALID_ARGUMENT', `StoreServer.start: port must be an integer in 0..65535, got ${port}`);
    }
    const server = net.createServer({ noDelay: true });
    if (refusalLogPeriodMs !== undefined && !(Number.isFinite(refusalLogPeriodMs) && refusalLogPeriodMs > 0)) {
      throw new NcclNodeError('ERR_INVALID_ARGUMENT', `StoreServer.start: refusalLogPeriodMs must be a positive number, got ${refusalLogPeriodMs}`);
    }
    const store = new StoreServer(server, token, log, refusalLogPeriodMs);
    await new Promise<void>((resolve, reject) => {
      const onError = (err: Error): void =>
        reject(new NcclNodeError('ERR_STORE', `store could not listen on ${host ?? '*'}:${port}: ${err.message}`, { host, port, errno: (err as NodeJS.ErrnoException).code }));
      server.once('error', onError);
      server.listen({ host, port }, () => {
        server.off('error', onError);
        resolve();
      });
    });
    // Later server errors (e.g. accept failing on EMFILE) must not crash the process.
    server.on('error', (err) => store.log(`server error: ${err.message}`));
    store.address = server.address() as net.AddressInfo;
    return store;
  }

  /** The port listened on (the real one when started with port 0). */
  get port(): number {
    return this.address.port;
  }

  /** The address listened on, e.g. "127.0.0.1" or "::". */
  get host(): string {
    return this.address.address;
  }

  /** Local access for a launcher in the same process; no TCP client needed. */
  has(key: string): boolean {
    return this.data.has(key);
  }

  /** A copy of the value, or undefined when the key is absent. */
  get(key: string): Uint8Array | undefined {
    const v = this.data.get(key);
    return v === undefined ? undefined : new Uint8Array(v);
  }

  /** Same effect as a client's SET: wakes waiters and notifies onSet listeners. */
  set(key: string, value: Uint8Array | string): void {
    this.store(key, typeof value === 'string' ? Buffer.from(value, 'utf8') : Buffer.from(value));
  }

  /** Calls `listener` after every SET or ADD (local or remote). Returns an unsubscribe function. */
  onSet(listener: SetListener): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** Whether a client that authenticated under this name still has a connection open (a launcher's liveness). */
  hasClient(clientName: string): boolean {
    for (const c of this.conns) if (c.authenticated && !c.done && c.clientName === clientName) return true;
    return false;
  }

  /** Stops listening, answers every parked GET/WAIT with CLOSING and closes all connections. */
  close(): Promise<void> {
    this.closing ??= new Promise<void>((resolve) => {
      this.refusals.flush();
      this.server.close(() => resolve());
      for (const conn of this.conns) {
        for (const w of [...conn.waiters]) {
          this.dropWaiter(w);
          w.reply(encodeReply(Status.Closing));
        }
        conn.shutdown();
      }
    });
    return this.closing;
  }

  private accept(socket: net.Socket): void {
    const peer = `${socket.remoteAddress ?? '?'}:${socket.remotePort ?? '?'}`;
    const conn = new Connection(socket, peer);
    if (this.closing) {
      socket.destroy();
      return;
    }
    this.conns.add(conn);
    socket.setNoDelay(true);
    // Keepalive lets the server notice a client host that vanished without a FIN.
    socket.setKeepAlive(true, 30_000);
    const authTimer = setTimeout(() => {
      if (!conn.authenticated) this.refuse(conn, `did not authenticate within ${AUTH_DEADLINE_MS} ms`);
    }, AUTH_DEADLINE_MS);
    authTimer.unref();

    socket.on('data', (chunk: Buffer) => {
      if (conn.done) return;
      try {
        conn.parser.push(chunk, (body) => {
          if (!conn.done) this.handle(conn, body);
        });
      } catch (err) {
        // Only a misbehaving peer gets here (both clients check sizes before sending).
        // The reply jumps the queue: parked requests on this socket will never be answered.
        const msg = err instanceof FrameTooLargeError ? `request too large: ${err.message}` : `internal error: ${String(err)}`;
        const line = `closing connection from ${peer}${nameOf(conn)}: ${msg}`;
        if (conn.authenticated) this.log(line);
        else this.refusals.refused(addressOf(socket), line);
        for (const w of [...conn.waiters]) this.dropWaiter(w);
        socket.write(badRequest(msg));
        conn.shutdown();
      }
    });
    socket.on('error', () => {
      // 'close' follows; a reset peer needs no log line of its own.
    });
    socket.on('close', () => {
      clearTimeout(authTimer);
      conn.done = true;
      for (const w of [...conn.waiters]) this.dropWaiter(w);
      this.conns.delete(conn);
    });
  }

  private refuse(conn: Connection, why: string): void {
    this.refusals.refused(addressOf(conn.socket), `refused connection from ${conn.peer}${nameOf(conn)}: ${why}`);
    conn.reserve()(encodeReply(Status.Unauthorized));
    conn.shutdown();
  }

  private handle(conn: Connection, body: Buffer): void {
    if (!conn.authenticated) {
      this.authenticate(conn, body);
      return;
    }
    const reply = conn.reserve();
    let req: Request;
    try {
      req = decodeRequest(body);
    } catch (err) {
      reply(badRequest(`malformed ${opName(body[0] ?? 0)} request: ${(err as Error).message}`));
      return;
    }
    this.execute(conn, req, reply);
  }

  private authenticate(conn: Connection, body: Buffer): void {
    let req: Request | undefined;
    try {
      req = decodeRequest(body);
    } catch {
      // Falls through to the refusal below.
    }
    if (req?.op !== Op.Auth) {
      this.refuse(conn, `first request was ${req ? opName(req.op) : 'malformed'}, not AUTH`);
      return;
    }
    conn.clientName = req.clientName;
    const scope = this.scopeOf(req.token);
    if (scope === undefined) {
      this.refuse(conn, 'wrong token');
      return;
    }
    conn.scope = scope;
    conn.authenticated = true;
    conn.parser.maxBody = MAX_BODY_BYTES;
    conn.reserve()(encodeReply(Status.Ok));
  }

  /**
   * The key prefix `token` grants: '' for the job token, a scope's prefix for a token
   * scoped from it (scope.ts), undefined for anything else. Digests make the lengths
   * equal, which timingSafeEqual requires.
   */
  private scopeOf(raw: Uint8Array): string | undefined {
    const sent = digest(raw);
    if (timingSafeEqual(sent, this.tokenDigest)) return '';
    const claim = claimedScope(this.token, Buffer.from(raw).toString('utf8'));
    if (claim === undefined) return undefined;
    return timingSafeEqual(sent, digest(Buffer.from(claim.expected, 'utf8'))) ? scopeKeyPrefix(claim.name) : undefined;
  }

  private execute(conn: Connection, unscoped: Request, reply: Reply): void {
    const req = conn.scope === '' ? unscoped : withScope(unscoped, conn.scope);
    switch (req.op) {
      case Op.Auth:
        // A repeated AUTH is re-checked, never a way around the first one.
        if (this.scopeOf(req.token) !== conn.scope) {
          reply(encodeReply(Status.Unauthorized));
          this.log(`refused connection from ${conn.peer}${nameOf(conn)}: wrong token on repeated AUTH`);
          conn.shutdown();
          return;
        }
        return reply(encodeReply(Status.Ok));
      case Op.Set:
        this.store(req.key, Buffer.from(req.value));
        return reply(encodeReply(Status.Ok));
      case Op.Get: {
        const { key } = req;
        const ok = (): Buffer => encodeReply(Status.Ok, (w) => w.bytes(this.data.get(key) ?? Buffer.alloc(0)));
        if (this.data.has(key)) return reply(ok());
        return this.park(conn, [key], req.timeoutMs, reply, ok);
      }
      case Op.Add: {
        const old = this.data.get(req.key);
        const text = old === undefined ? '0' : old.toString('utf8');
        if (!/^-?\d+$/.test(text)) {
          return reply(badRequest(`ADD on key ${JSON.stringify(unscopedKey(req.key, conn))}: its value is not a decimal integer`));
        }
        const next = BigInt(text) + req.delta;
        if (!inI64Range(next)) {
          return reply(badRequest(`ADD on key ${JSON.stringify(unscopedKey(req.key, conn))}: result ${next} overflows int64`));
        }
        this.store(req.key, Buffer.from(next.toString(), 'utf8'));
        return reply(encodeReply(Status.Ok, (w) => w.i64(next)));
      }
      case Op.Check:
        return reply(encodeReply(Status.Ok, (w) => w.u8(this.data.has(req.key) ? 1 : 0)));
      case Op.Wait: {
        const ok = (): Buffer => encodeReply(Status.Ok);
        if (req.keys.every((k) => this.data.has(k))) return reply(ok());
        return this.park(conn, req.keys, req.timeoutMs, reply, ok);
      }
      case Op.Delete: {
        const existed = this.data.delete(req.key);
        return reply(encodeReply(Status.Ok, (w) => w.u8(existed ? 1 : 0)));
      }
      case Op.Ping:
        return reply(encodeReply(Status.Ok));
    }
  }

  private store(key: string, value: Buffer): void {
    this.data.set(key, value);
    const waiting = this.waitersByKey.get(key);
    if (waiting) {
      for (const w of [...waiting]) {
        // Re-check every key: one may have been deleted since the waiter parked.
        if (w.keys.every((k) => this.data.has(k))) {
          this.dropWaiter(w);
          w.reply(w.ready());
        }
      }
    }
    for (const listener of this.listeners) {
      try {
        listener(key, new Uint8Array(value));
      } catch (err) {
        this.log(`onSet listener threw for key ${JSON.stringify(key)}: ${(err as Error).message}`);
      }
    }
  }

  private park(conn: Connection, keys: string[], timeoutMs: number, reply: Reply, ready: () => Buffer): void {
    const ms = timeoutMs === 0 ? DEFAULT_TIMEOUT_MS : timeoutMs;
    const waiter: Waiter = {
      keys,
      conn,
      reply,
      ready,
      timer: setTimeout(() => {
        this.dropWaiter(waiter);
        const missing = keys.filter((k) => !this.data.has(k)).map((k) => k.slice(conn.scope.length));
        const msg = `timed out after ${ms} ms waiting for key(s) ${describeKeys(missing)}`;
        reply(encodeReply(Status.Timeout, (w) => w.bytes(msg)));
      }, Math.min(ms, MAX_TIMER_MS)),
    };
    conn.waiters.add(waiter);
    for (const k of new Set(keys)) {
      let set = this.waitersByKey.get(k);
      if (!set) this.waitersByKey.set(k, (set = new Set()));
      set.add(waiter);
    }
  }

  private dropWaiter(w: Waiter): void {
    clearTimeout(w.timer);
    w.conn.waiters.delete(w);
    for (const k of w.keys) {
      const set = this.waitersByKey.get(k);
      if (set?.delete(w) && set.size === 0) this.waitersByKey.delete(k);
    }
  }
}

/** The request with every key moved under `scope`. */
function unscopedKey(key: string, conn: Connection): string {
  return key.slice(conn.scope.length);
}

function withScope(req: Request, scope: string): Request {
  if ('key' in req) return { ...req, key: scope + req.key };
  if ('keys' in req) return { ...req, keys: req.keys.map((k) => scope + k) };
  return req;
}

/** The peer's address without its port, for per-address counts. */
function addressOf(socket: net.Socket): string {
  return (socket.remoteAddress ?? '?').replace(/^::ffff:/, '');
}

function digest(b: Uint8Array): Buffer {
  return createHash('sha256').update(b).digest();
}

function badRequest(msg: string): Buffer {
  return encodeReply(Status.BadRequest, (w: FrameWriter) => w.bytes(msg));
}

/** The client name for logs, quoted so odd bytes from strangers stay visible and bounded. */
function nameOf(conn: Connection): string {
  return conn.clientName ? ` (client ${JSON.stringify(conn.clientName.slice(0, 200))})` : '';
}
