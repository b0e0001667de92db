/**
 * TypeScript client of the job's rendezvous store (protocol: docs/rendezvous.md).
 *
 * One TCP connection; requests may be issued concurrently and are pipelined.
 * Replies arrive in request order, so a GET/WAIT that blocks on the server also
 * delays the *replies* (not the effects) of requests issued after it on the same
 * client. Use a separate StoreClient for traffic that must not queue behind a
 * blocking call (heartbeats, for example). A lost connection is not re-opened:
 * ADD is not idempotent, so blindly replaying requests would be wrong.
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
   * How long to wait for an answer beyond the operation's own timeout before the
   * connection is declared dead. Default 30 s.
   */
  requestTimeoutMs?: number;
}

export interface TimeoutOptions {
  /** Server-side wait limit; 0 or absent means the server default (10 minutes). */
  timeoutMs?: number;
}

interface Pending {
  what: string;
  details: Record<string, unknown>;
  /** Replies come in order, so deadlines never decrease along the queue. */
  deadline: number;
  parse: (r: BodyReader) => unknown;
  resolve: (v: unknown) => void;
  reject: (e: Error) => void;
}

const MAX_BACKOFF_MS = 1000;
const utf8 = new TextDecoder();

export class StoreClient {
  private readonly pending: Pending[] = [];
  private readonly parser = new FrameParser(MAX_BODY_BYTES);
  private timer: NodeJS.Timeout | undefined;
  /** Set once the connection is unusable; every later call rejects with it. */
  private dead: NcclNodeError | undefined;

  private constructor(
    private readonly socket: net.Socket,
    readonly host: string,
    readonly port: number,
    private readonly requestTimeoutMs: number,
  ) {
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
    });
  }

  /** Connects (retrying with backoff until connectTimeoutMs) and authenticates. */
  static async connect(options: StoreClientOptions): Promise<StoreClient> {
    const { host, port, token } = options;
    const clientName = options.clientName ?? `${os.hostname()}:${process.pid}`;
    const connectTimeoutMs = options.connectTimeoutMs ?? 30_000;
    const requestTimeoutMs = options.requestTimeoutMs ?? 30_000;
    if (typeof host !== 'string' || host === '') throw invalid('host must be a non-empty string');
    if (!Number.isInteger(port) || port < 1 || port > 65535) throw invalid(`port must be in 1..65535, got ${port}`);
    if (typeof token !== 'string' || token === '') throw invalid('token must be a non-empty string');
    for (const [name, v] of [['connectTimeoutMs', connectTimeoutMs], ['requestTimeoutMs', requestTimeoutMs]] as const) {
      if (!Number.isFinite(v) || v <= 0) throw invalid(`${name} must be a positive number, got ${v}`);
    }

    const endpoint = formatEndpoint(host, port);
    const deadline = Date.now() + connectTimeoutMs;
    let backoff = 50;
    let lastError = 'no attempt made';
    for (;;) {
      const left = deadline - Date.now();
      if (left <= 0) {
        throw new NcclNodeError(
          'ERR_TIMEOUT',
          `could not connect to the store at ${endpoint} within ${connectTimeoutMs} ms (last error: ${lastError})`,
          { host, port, timeoutMs: connectTimeoutMs },
        );
      }
      try {
        const socket = await openSocket(host, port, left);
        const client = new StoreClient(socket, host, port, requestTimeoutMs);
        await client.authenticate(token, clientName, Math.max(1, deadline - Date.now()));
        return client;
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
    await this.request({ op: Op.Set, key, value: typeof value === 'string' ? Buffer.from(value, 'utf8') : value }, 0, `SET ${JSON.stringify(key)}`, { key }, () => undefined);
  }

  /** Waits until the key exists, then returns its value. */
  async get(key: string, options: TimeoutOptions = {}): Promise<Uint8Array> {
    checkKey(key);
    const timeoutMs = checkTimeout(options.timeoutMs);
    return this.request({ op: Op.Get, key, timeoutMs }, timeoutMs, `GET ${JSON.stringify(key)}`, { key, timeoutMs }, (r) => new Uint8Array(r.bytes()));
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
    return this.request({ op: Op.Add, key, delta: d }, 0, `ADD ${JSON.stringify(key)}`, { key }, (r) => r.i64());
  }

  async check(key: string): Promise<boolean> {
    checkKey(key);
    return this.request({ op: Op.Check, key }, 0, `CHECK ${JSON.stringify(key)}`, { key }, (r) => r.u8() !== 0);
  }

  /** Waits until every key exists; ERR_TIMEOUT names the keys still missing. */
  async wait(keys: readonly string[], options: TimeoutOptions = {}): Promise<void> {
    if (!Array.isArray(keys)) throw invalid('wait: keys must be an array of strings');
    keys.forEach(checkKey);
    const timeoutMs = checkTimeout(options.timeoutMs);
    await this.request({ op: Op.Wait, keys: [...keys], timeoutMs }, timeoutMs, `WAIT ${describeKeys(keys)}`, { keys: [...keys], timeoutMs }, () => undefined);
  }

  /** Removes the key; returns whether it existed. */
  async delete(key: string): Promise<boolean> {
    checkKey(key);
    return this.request({ op: Op.Delete, key }, 0, `DELETE ${JSON.stringify(key)}`, { key }, (r) => r.u8() !== 0);
  }

  async ping(): Promise<void> {
    await this.request({ op: Op.Ping }, 0, 'PING', {}, () => undefined);
  }

  /** Closes the connection; pending calls reject with ERR_STORE. Idempotent. */
  async close(): Promise<void> {
    this.fail(new NcclNodeError('ERR_STORE', `store client for ${this.endpoint} was closed`, { host: this.host, port: this.port }));
    if (!this.socket.closed) await new Promise((resolve) => this.socket.once('close', resolve));
  }

  private get endpoint(): string {
    return formatEndpoint(this.host, this.port);
  }

  private async authenticate(token: string, clientName: string, timeoutMs: number): Promise<void> {
    try {
      await this.request({ op: Op.Auth, token: Buffer.from(token, 'utf8'), clientName }, 0, 'AUTH', { clientName }, () => undefined, timeoutMs);
    } catch (err) {
      this.socket.destroy();
      throw err;
    }
  }

  /**
   * Sends one request. `waitMs` is how long the server may legitimately hold it
   * (0 = not a blocking op); the client gives up `margin` after that.
   */
  private request<T>(
    req: Request,
    waitMs: number,
    what: string,
    details: Record<string, unknown>,
    parse: (r: BodyReader) => T,
    margin = this.requestTimeoutMs,
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
    const deadline = Math.max(Date.now() + serverWait + margin, prev?.deadline ?? 0);
    return new Promise<T>((resolve, reject) => {
      this.pending.push({ what, details, deadline, parse, resolve: resolve as (v: unknown) => void, reject });
      if (this.pending.length === 1) {
        this.socket.ref(); // a caller is waiting: keep the process alive until the reply
        this.armTimer();
      }
      this.socket.write(frame);
    });
  }

  private onReply(body: Buffer): void {
    const p = this.pending.shift();
    if (!p) {
      this.fail(this.storeError('sent a reply nobody asked for'));
      return;
    }
    if (this.pending.length === 0) this.socket.unref(); // idle clients must not hold the event loop open
    this.armTimer();
    const r = new BodyReader(body);
    const where = `store at ${this.endpoint}: ${p.what}`;
    const details = { host: this.host, port: this.port, ...p.details };
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
      const msg = `store at ${this.endpoint}: no reply to ${head.what} in time; the connection is considered dead`;
      head.reject(new NcclNodeError('ERR_TIMEOUT', msg, { host: this.host, port: this.port, ...head.details }));
      this.pending.shift();
      this.fail(this.storeError(`stopped answering (${head.what} timed out)`));
    }, Math.max(0, head.deadline - Date.now()));
  }

  /** Marks the client dead, rejects everything pending and drops the socket. */
  private fail(err: NcclNodeError): void {
    this.dead ??= err;
    clearTimeout(this.timer);
    for (const p of this.pending.splice(0)) p.reject(this.dead);
    this.socket.destroy();
  }

  private storeError(what: string): NcclNodeError {
    return new NcclNodeError('ERR_STORE', `store at ${this.endpoint} ${what}`, { host: this.host, port: this.port });
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
    socket.once('connect', () => {
      clearTimeout(timer);
      socket.off('error', onError);
      socket.setKeepAlive(true, 30_000);
      resolve(socket);
    });
    const onError = (err: Error): void => {
      clearTimeout(timer);
      socket.destroy();
      reject(err);
    };
    socket.once('error', onError);
  });
}

function formatEndpoint(host: string, port: number): string {
  return host.includes(':') ? `[${host}]:${port}` : `${host}:${port}`;
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
