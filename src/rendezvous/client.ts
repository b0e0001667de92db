/**
 * TypeScript client of the job's rendezvous store (protocol: docs/rendezvous.md).
 *
 * The server answers the requests of one connection in order, so a GET/WAIT that
 * blocks there would hold back the replies to everything sent after it (and a
 * `set` awaited behind a `get` that waits for that very set would deadlock).
 * So non-blocking ops share one pipelined connection, and each GET/WAIT in flight
 * gets a connection of its own, taken from a small pool of idle ones. The price:
 * a get/wait is not ordered against calls that were not awaited before it.
 *
 * A lost connection is not re-opened: ADD is not idempotent, so replaying
 * requests blindly would be wrong. Idle clients do not keep Node's event loop
 * alive; a call in flight does.
 */
import net from 'node:net';
import os from 'node:os';

import { NcclNodeError } from '../errors.js';
import {
  BodyReader,
  DEFAULT_TIMEOUT_MS,
  FrameParser,
  FrameTooLargeError,
  MAX_BODY_BYTES,
  MAX_TIMEOUT_MS,
  Op,
  Status,
  describeKeys,
  encodeRequest,
  inI64Range,
  type Request,
} from './protocol.js';

export interface StoreClientOptions {
  host: string;
  port: number;
  token: string;
  /** Shown in the server's logs; default `<hostname>:<pid>`. */
  clientName?: string;
  /** Keep retrying while the server is not up yet, for this long. Default 30 s. */
  connectTimeoutMs?: number;
  /**
   * How long to wait for an answer beyond the operation's own timeout before a
   * connection is declared dead. Default 30 s.
   */
  requestTimeoutMs?: number;
}

export interface TimeoutOptions {
  /** Server-side wait limit; 0 or absent means the server default (10 minutes). */
  timeoutMs?: number;
}

interface Target {
  host: string;
  port: number;
  token: string;
  clientName: string;
  requestTimeoutMs: number;
  endpoint: string;
}

const MAX_BACKOFF_MS = 1000;
/** Idle GET/WAIT connections kept for reuse; more are closed when they finish. */
const MAX_IDLE = 4;
const utf8 = new TextDecoder();

export class StoreClient {
  /** Every open connection, so close() reaches the ones busy in a get/wait. */
  private readonly conns = new Set<Connection>();
  private readonly idle: Connection[] = [];
  private closed: NcclNodeError | undefined;

  private constructor(private readonly target: Target, private readonly main: Connection) {
    this.conns.add(main);
    // Without the main connection the client is unusable: release the pooled ones.
    main.onClose = () => {
      for (const c of this.idle.splice(0)) void c.close(main.dead ?? c.idleClose());
    };
  }

  get host(): string {
    return this.target.host;
  }

  get port(): number {
    return this.target.port;
  }

  /** The job token, for native code that opens its own connection (src/comm/heartbeat.ts). */
  get token(): string {
    return this.target.token;
  }

  /**
   * This host's address on the connection to the store: an address the store's
   * host, and so most likely every peer, can reach (used for Gloo's listeners).
   */
  get localAddress(): string | undefined {
    return this.main.localAddress;
  }

  /** Connects (retrying with backoff until connectTimeoutMs) and authenticates. */
  static async connect(options: StoreClientOptions): Promise<StoreClient> {
    const { host, port, token } = options;
    const connectTimeoutMs = options.connectTimeoutMs ?? 30_000;
    const requestTimeoutMs = options.requestTimeoutMs ?? 30_000;
    if (typeof host !== 'string' || host === '') throw invalid('host must be a non-empty string');
    if (!Number.isInteger(port) || port < 1 || port > 65535) throw invalid(`port must be in 1..65535, got ${port}`);
    if (typeof token !== 'string' || token === '') throw invalid('token must be a non-empty string');
    for (const [name, v] of [['connectTimeoutMs', connectTimeoutMs], ['requestTimeoutMs', requestTimeoutMs]] as const) {
      if (!Number.isFinite(v) || v <= 0) throw invalid(`${name} must be a positive number, got ${v}`);
    }
    const endpoint = host.includes(':') ? `[${host}]:${port}` : `${host}:${port}`;
    const clientName = options.clientName ?? `${os.hostname()}:${process.pid}`;
    const target: Target = { host, port, token, clientName, requestTimeoutMs, endpoint };

    const deadline = Date.now() + connectTimeoutMs;
    let backoff = 50;
    let lastError = 'no attempt made';
    for (;;) {
      if (Date.now() >= deadline) {
        throw new NcclNodeError(
          'ERR_TIMEOUT',
          `could not connect to the store at ${endpoint} within ${connectTimeoutMs} ms (last error: ${lastError})`,
          { host, port, timeoutMs: connectTimeoutMs },
        );
      }
      try {
        return new StoreClient(target, await Connection.open(target, deadline));
      } catch (err) {
        // A refused token will not improve with retries. Anything else (refused,
        // reset, a proxy that accepts and then drops) may be a server still starting.
        if (err instanceof NcclNodeError && err.code === 'ERR_UNAUTHORIZED') throw err;
        lastError = (err as Error).message;
      }
      await new Promise((r) => setTimeout(r, Math.min(backoff, Math.max(0, deadline - Date.now()))));
      backoff = Math.min(backoff * 2, MAX_BACKOFF_MS);
    }
  }

  async set(key: string, value: Uint8Array | string): Promise<void> {
    checkKey(key);
    if (typeof value !== 'string' && !(value instanceof Uint8Array)) throw invalid('set: value must be a Uint8Array or a string');
    const bytes = typeof value === 'string' ? Buffer.from(value, 'utf8') : value;
    await this.live().request({ op: Op.Set, key, value: bytes }, 0, `SET ${JSON.stringify(key)}`, { key }, () => undefined);
  }

  /** Waits until the key exists, then returns its value. */
  async get(key: string, options: TimeoutOptions = {}): Promise<Uint8Array> {
    checkKey(key);
    const timeoutMs = checkTimeout(options.timeoutMs);
    const what = `GET ${JSON.stringify(key)}`;
    return this.blocking(what, (c) =>
      c.request({ op: Op.Get, key, timeoutMs }, timeoutMs, what, { key, timeoutMs }, (r) => new Uint8Array(r.bytes())),
    );
  }

  async getString(key: string, options: TimeoutOptions = {}): Promise<string> {
    return utf8.decode(await this.get(key, options));
  }

  /** Adds delta to the integer stored at key (missing counts as 0) and returns the new value. */
  async add(key: string, delta: bigint | number): Promise<bigint> {
    checkKey(key);
    if (typeof delta === 'number' && !Number.isSafeInteger(delta)) throw invalid(`add: delta must be a safe integer, got ${delta}`);
    const d = BigInt(delta);
    if (!inI64Range(d)) throw invalid(`add: delta ${d} does not fit in int64`);
    return this.live().request({ op: Op.Add, key, delta: d }, 0, `ADD ${JSON.stringify(key)}`, { key }, (r) => r.i64());
  }

  async check(key: string): Promise<boolean> {
    checkKey(key);
    return this.live().request({ op: Op.Check, key }, 0, `CHECK ${JSON.stringify(key)}`, { key }, (r) => r.u8() !== 0);
  }

  /** Waits until every key exists; ERR_TIMEOUT names the keys still missing. */
  async wait(keys: readonly string[], options: TimeoutOptions = {}): Promise<void> {
    if (!Array.isArray(keys)) throw invalid('wait: keys must be an array of strings');
    keys.forEach(checkKey);
    const timeoutMs = checkTimeout(options.timeoutMs);
    const what = `WAIT ${describeKeys(keys)}`;
    const list = [...keys];
    await this.blocking(what, (c) =>
      c.request({ op: Op.Wait, keys: list, timeoutMs }, timeoutMs, what, { keys: list, timeoutMs }, () => undefined),
    );
  }

  /** Removes the key; returns whether it existed. */
  async delete(key: string): Promise<boolean> {
    checkKey(key);
    return this.live().request({ op: Op.Delete, key }, 0, `DELETE ${JSON.stringify(key)}`, { key }, (r) => r.u8() !== 0);
  }

  async ping(): Promise<void> {
    await this.live().request({ op: Op.Ping }, 0, 'PING', {}, () => undefined);
  }

  /** Closes every connection; calls in flight reject with ERR_STORE. Idempotent. */
  async close(): Promise<void> {
    this.closed ??= new NcclNodeError('ERR_STORE', `store client for ${this.target.endpoint} was closed`, {
      host: this.host,
      port: this.port,
    });
    this.idle.length = 0;
    await Promise.all([...this.conns].map((c) => c.close(this.closed!)));
  }

  /** The main connection, or the reason the client can no longer be used. */
  private live(): Connection {
    const dead = this.closed ?? this.main.dead;
    if (dead) throw dead;
    return this.main;
  }

  /** Runs a GET/WAIT on a connection nobody else is waiting on. */
  private async blocking<T>(what: string, fn: (c: Connection) => Promise<T>): Promise<T> {
    this.live();
    let conn = this.idle.pop();
    while (conn?.dead) conn = this.idle.pop();
    if (!conn) {
      try {
        conn = await Connection.open(this.target, Date.now() + this.target.requestTimeoutMs);
      } catch (err) {
        if (err instanceof NcclNodeError) throw err;
        throw new NcclNodeError('ERR_STORE', `store at ${this.target.endpoint}: ${what}: could not open a connection: ${(err as Error).message}`, {
          host: this.host,
          port: this.port,
        });
      }
      this.conns.add(conn);
      conn.onClose = (c) => this.conns.delete(c);
      const dead = this.closed ?? this.main.dead; // close() may have run while we connected
      if (dead) {
        await conn.close(dead);
        throw dead;
      }
    }
    try {
      return await fn(conn);
    } finally {
      if (!conn.dead && !this.closed && !this.main.dead && this.idle.length < MAX_IDLE) this.idle.push(conn);
      else void conn.close(this.closed ?? conn.dead ?? conn.idleClose());
    }
  }
}

interface Pending {
  what: string;
  details: Record<string, unknown>;
  /** Replies come in order, so deadlines never decrease along the queue. */
  deadline: number;
  /** deadline minus the time the request was sent, for messages. */
  limitMs: number;
  parse: (r: BodyReader) => unknown;
  resolve: (v: unknown) => void;
  reject: (e: Error) => void;
}

/** One authenticated TCP connection: pipelined requests, replies in order. */
class Connection {
  private readonly pending: Pending[] = [];
  private readonly parser = new FrameParser(MAX_BODY_BYTES);
  private timer: NodeJS.Timeout | undefined;
  /** Set once the connection is unusable; every later request rejects with it. */
  dead: NcclNodeError | undefined;
  onClose: ((c: Connection) => void) | undefined;

  get localAddress(): string | undefined {
    const addr = this.socket.localAddress;
    // An IPv4 peer reached through a dual-stack socket shows as ::ffff:a.b.c.d.
    return addr?.startsWith('::ffff:') ? addr.slice(7) : addr;
  }

  private constructor(private readonly socket: net.Socket, private readonly target: Target) {
    socket.on('data', (chunk: Buffer) => {
      try {
        this.parser.push(chunk, (body) => this.onReply(body));
      } catch (err) {
        this.fail(this.storeError(`sent a bad reply: ${(err as Error).message}`));
      }
    });
    let lastError: Error | undefined;
    socket.on('error', (err) => (lastError = err));
    socket.on('close', () => {
      this.fail(this.storeError(`closed the connection${lastError ? ` (${lastError.message})` : ''}`));
      this.onClose?.(this);
    });
  }

  /** One attempt: TCP connect, then AUTH, both before `deadline`. */
  static async open(target: Target, deadline: number): Promise<Connection> {
    const socket = await openSocket(target.host, target.port, Math.max(1, deadline - Date.now()));
    const conn = new Connection(socket, target);
    const token = Buffer.from(target.token, 'utf8');
    try {
      await conn.request({ op: Op.Auth, token, clientName: target.clientName }, 0, 'AUTH', { clientName: target.clientName }, () => undefined, Math.max(1, deadline - Date.now()));
    } catch (err) {
      socket.destroy();
      throw err;
    }
    return conn;
  }

  /**
   * Sends one request. `waitMs` is how long the server may legitimately hold it
   * (GET/WAIT only); the connection is declared dead `margin` ms after that.
   */
  request<T>(
    req: Request,
    waitMs: number,
    what: string,
    details: Record<string, unknown>,
    parse: (r: BodyReader) => T,
    margin = this.target.requestTimeoutMs,
  ): Promise<T> {
    if (this.dead) return Promise.reject(this.dead);
    let frame: Buffer;
    try {
      frame = encodeRequest(req);
    } catch (err) {
      if (!(err instanceof FrameTooLargeError)) throw err;
      return Promise.reject(invalid(`${what}: request of ${err.size} bytes exceeds the store's limit of ${err.limit} bytes`));
    }
    const serverWait = req.op === Op.Get || req.op === Op.Wait ? waitMs || DEFAULT_TIMEOUT_MS : 0;
    const prev = this.pending[this.pending.length - 1];
    const now = Date.now();
    const deadline = Math.max(now + serverWait + margin, prev?.deadline ?? 0);
    return new Promise<T>((resolve, reject) => {
      this.pending.push({ what, details, deadline, limitMs: deadline - now, parse, resolve: resolve as (v: unknown) => void, reject });
      if (this.pending.length === 1) {
        this.socket.ref(); // a caller is waiting: keep the process alive until the reply
        this.armTimer();
      }
      this.socket.write(frame);
    });
  }

  /** Marks the connection dead with `err`, rejects what is pending, and waits for the socket to close. */
  async close(err: NcclNodeError): Promise<void> {
    this.fail(err);
    if (!this.socket.closed) await new Promise((resolve) => this.socket.once('close', resolve));
  }

  /** The reason given to a surplus pooled connection that is closed after use. */
  idleClose(): NcclNodeError {
    return this.storeError('connection closed: the idle pool is full');
  }

  private onReply(body: Buffer): void {
    const p = this.pending.shift();
    if (!p) {
      this.fail(this.storeError('sent a reply nobody asked for'));
      return;
    }
    if (this.pending.length === 0) this.socket.unref(); // idle: do not hold the event loop open
    this.armTimer();
    const r = new BodyReader(body);
    const where = `store at ${this.target.endpoint}: ${p.what}`;
    const details = { host: this.target.host, port: this.target.port, ...p.details };
    try {
      const status = r.u8();
      switch (status) {
        case Status.Ok: {
          const v = p.parse(r);
          r.end();
          p.resolve(v);
          return;
        }
        case Status.Timeout:
          p.reject(new NcclNodeError('ERR_TIMEOUT', `${where}: ${r.string()}`, details));
          return;
        case Status.Unauthorized:
          p.reject(new NcclNodeError('ERR_UNAUTHORIZED', `${where}: the store refused the job token (is NCCL_NODE_TOKEN the job's?)`, details));
          return;
        case Status.BadRequest:
          p.reject(new NcclNodeError('ERR_STORE', `${where}: rejected: ${r.string()}`, details));
          return;
        case Status.Closing:
          p.reject(new NcclNodeError('ERR_STORE', `${where}: the store is shutting down`, details));
          return;
        default:
          p.reject(new NcclNodeError('ERR_STORE', `${where}: unknown reply status ${status}`, details));
      }
    } catch (err) {
      p.reject(new NcclNodeError('ERR_STORE', `${where}: malformed reply: ${(err as Error).message}`, details));
    }
  }

  /** One timer, for the oldest request; later ones cannot be answered before it. */
  private armTimer(): void {
    clearTimeout(this.timer);
    const head = this.pending[0];
    if (!head) return;
    this.timer = setTimeout(() => {
      const msg = `store at ${this.target.endpoint}: no reply to ${head.what} within ${head.limitMs} ms; the connection is considered dead`;
      head.reject(new NcclNodeError('ERR_TIMEOUT', msg, { host: this.target.host, port: this.target.port, ...head.details }));
      this.pending.shift();
      this.fail(this.storeError(`stopped answering (${head.what} timed out)`));
    }, Math.max(0, head.deadline - Date.now()));
    this.timer.unref(); // the socket is ref'd while requests are pending; that is what keeps the process up
  }

  private fail(err: NcclNodeError): void {
    this.dead ??= err;
    clearTimeout(this.timer);
    for (const p of this.pending.splice(0)) p.reject(this.dead);
    this.socket.destroy();
  }

  private storeError(what: string): NcclNodeError {
    return new NcclNodeError('ERR_STORE', `store at ${this.target.endpoint} ${what}`, { host: this.target.host, port: this.target.port });
  }
}

/** One TCP connect attempt, bounded by timeoutMs (a black-holed SYN would otherwise take minutes). */
function openSocket(host: string, port: number, timeoutMs: number): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ host, port, noDelay: true });
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`connect timed out after ${Math.round(timeoutMs)} ms`));
    }, timeoutMs);
    const onError = (err: Error): void => {
      clearTimeout(timer);
      socket.destroy();
      reject(err);
    };
    socket.once('error', onError);
    socket.once('connect', () => {
      clearTimeout(timer);
      socket.off('error', onError);
      socket.setKeepAlive(true, 30_000);
      resolve(socket);
    });
  });
}

function invalid(msg: string): NcclNodeError {
  return new NcclNodeError('ERR_INVALID_ARGUMENT', `StoreClient: ${msg}`);
}

function checkKey(key: unknown): void {
  if (typeof key !== 'string' || key === '') throw invalid(`keys must be non-empty strings, got ${JSON.stringify(key)}`);
}

function checkTimeout(timeoutMs: number | undefined): number {
  const t = timeoutMs ?? 0;
  if (!Number.isInteger(t) || t < 0 || t > MAX_TIMEOUT_MS) {
    throw invalid(`timeoutMs must be an integer in 0..${MAX_TIMEOUT_MS}, got ${timeoutMs}`);
  }
  return t;
}
