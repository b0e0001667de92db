/**
 * A small client for PyTorch's TCPStore, the key-value store torchrun's agent runs on
 * MASTER_ADDR:MASTER_PORT and shares with its workers (TORCHELASTIC_USE_AGENT_STORE).
 * init() uses it only to tell the ranks where the job's own store is
 * (src/launch/agent-store.ts); everything else goes through that store.
 *
 * Wire format (native byte order, little-endian on every platform we run on): a
 * request is `u8 query` and its fields; strings and byte vectors are `u64 length` and
 * the bytes. A connection starts with VALIDATE and a magic number, without reply. SET
 * has no reply; ADD answers `i64`; CHECK and WAIT answer one `u8`; GET answers a
 * vector, and only makes sense once WAIT says the key exists. Like torch's own
 * client, every key is sent with a leading "/", so a Python `TCPStore` sees the same keys.
 */
import net from 'node:net';

import { NcclNodeError } from '../errors.js';

const Query = { Validate: 0, Set: 1, Get: 3, Add: 4, Check: 5, Wait: 6 } as const;
const VALIDATION_MAGIC = 0x3c85f7ce;
const CHECK_READY = 0;
const WAIT_STOP_WAITING = 0;
/** torch's servers refuse longer keys and values; refuse them here with a clear error. */
const MAX_KEY_BYTES = 8 * 1024;
const MAX_VALUE_BYTES = 8 * 1024 * 1024;
const KEY_PREFIX = '/';

export interface TcpStoreClientOptions {
  host: string;
  port: number;
  /** Keep retrying while nothing listens yet, for this long. Default 30 s. */
  connectTimeoutMs?: number;
}

/** Takes its reply off the front of the receive buffer; undefined while it is incomplete. */
type Reader<T> = (buf: Buffer) => { value: T; used: number } | undefined;

interface Pending {
  read: Reader<unknown>;
  resolve: (v: unknown) => void;
  reject: (e: Error) => void;
}

const u8: Reader<number> = (b) => (b.length >= 1 ? { value: b[0]!, used: 1 } : undefined);
const i64: Reader<bigint> = (b) => (b.length >= 8 ? { value: b.readBigInt64LE(0), used: 8 } : undefined);
const vector: Reader<Buffer> = (b) => {
  if (b.length < 8) return undefined;
  const n = b.readBigUInt64LE(0);
  if (n > BigInt(MAX_VALUE_BYTES)) throw new NcclNodeError('ERR_STORE', `TCPStore reply claims ${n} bytes, more than the ${MAX_VALUE_BYTES} a value may have`);
  const len = Number(n);
  return b.length >= 8 + len ? { value: Buffer.from(b.subarray(8, 8 + len)), used: 8 + len } : undefined;
};

function u64(n: number): Buffer {
  const b = Buffer.allocUnsafe(8);
  b.writeBigUInt64LE(BigInt(n));
  return b;
}

function field(data: Uint8Array, max: number, what: string): Buffer[] {
  if (data.length > max) throw new NcclNodeError('ERR_INVALID_ARGUMENT', `TCPStore ${what} of ${data.length} bytes exceeds ${max} bytes`);
  return [u64(data.length), Buffer.from(data)];
}

function keyField(key: string): Buffer[] {
  return field(Buffer.from(KEY_PREFIX + key, 'utf8'), MAX_KEY_BYTES, 'key');
}

export class TcpStoreClient {
  private received: Buffer = Buffer.alloc(0);
  private readonly pending: Pending[] = [];
  private failure: Error | undefined;

  private constructor(private readonly socket: net.Socket, private readonly where: string) {
    socket.on('data', (chunk: Buffer) => this.onData(chunk));
    socket.on('error', (err) => this.fail(new NcclNodeError('ERR_STORE', `TCPStore at ${where}: ${err.message}`)));
    socket.on('close', () => this.fail(new NcclNodeError('ERR_STORE', `TCPStore at ${where} closed the connection`)));
  }

  /** Connects (retrying while the port refuses) and introduces itself as torch's client does. */
  static async connect(options: TcpStoreClientOptions): Promise<TcpStoreClient> {
    const { host, port } = options;
    if (!Number.isInteger(port) || port < 1 || port > 65535) {
      throw new NcclNodeError('ERR_INVALID_ARGUMENT', `TCPStore port: expected an integer in [1, 65535], got ${port}`);
    }
    const where = `${host}:${port}`;
    const deadline = Date.now() + (options.connectTimeoutMs ?? 30_000);
    let lastError = '';
    for (let delay = 20; ; delay = Math.min(delay * 2, 500)) {
      try {
        const socket = await new Promise<net.Socket>((resolve, reject) => {
          const s = net.connect({ host, port });
          s.once('connect', () => {
            s.off('error', reject);
            resolve(s);
          });
          s.once('error', reject);
        });
        socket.setNoDelay(true);
        const client = new TcpStoreClient(socket, where);
        const hello = Buffer.allocUnsafe(5);
        hello.writeUInt8(Query.Validate, 0);
        hello.writeUInt32LE(VALIDATION_MAGIC, 1);
        socket.write(hello);
        return client;
      } catch (err) {
        lastError = (err as Error).message;
      }
      if (Date.now() + delay > deadline) {
        throw new NcclNodeError('ERR_TIMEOUT', `could not reach torch's TCPStore at ${where}: ${lastError}`, { host, port });
      }
      await new Promise((r) => setTimeout(r, delay));
    }
  }

  /** The local address of the connection: an address of this host that the store's host can reach. */
  get localAddress(): string | undefined {
    return this.socket.localAddress;
  }

  async set(key: string, value: Uint8Array | string): Promise<void> {
    const data = typeof value === 'string' ? Buffer.from(value, 'utf8') : value;
    this.send([Buffer.of(Query.Set), ...keyField(key), ...field(data, MAX_VALUE_BYTES, 'value')]);
  }

  /** Atomically adds `delta` to the key's integer value (a missing key counts as 0); returns the new value. */
  add(key: string, delta: number | bigint): Promise<bigint> {
    const d = Buffer.allocUnsafe(8);
    d.writeBigInt64LE(BigInt(delta));
    return this.request([Buffer.of(Query.Add), ...keyField(key), d], i64);
  }

  async check(keys: readonly string[]): Promise<boolean> {
    return (await this.request([Buffer.of(Query.Check), u64(keys.length), ...keys.flatMap(keyField)], u8)) === CHECK_READY;
  }

  /**
   * Resolves once every key exists. On timeout the connection is closed (a parked WAIT
   * cannot be withdrawn without a round of its own) and ERR_TIMEOUT names the keys.
   */
  async wait(keys: readonly string[], timeoutMs: number): Promise<void> {
    const reply = this.request([Buffer.of(Query.Wait), u64(keys.length), ...keys.flatMap(keyField)], u8);
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        const err = new NcclNodeError('ERR_TIMEOUT', `timed out after ${timeoutMs} ms waiting for ${keys.map((k) => JSON.stringify(k)).join(', ')} in torch's TCPStore at ${this.where}`, { keys: [...keys] });
        this.fail(err);
        reject(err);
      }, timeoutMs);
    });
    try {
      const r = await Promise.race([reply, timeout]);
      if (r !== WAIT_STOP_WAITING) throw new NcclNodeError('ERR_STORE', `TCPStore at ${this.where} answered WAIT with ${r}`);
    } finally {
      clearTimeout(timer);
    }
  }

  /** The key's value, waiting up to `timeoutMs` for it to be set. */
  async get(key: string, timeoutMs: number): Promise<Buffer> {
    await this.wait([key], timeoutMs);
    return this.request([Buffer.of(Query.Get), ...keyField(key)], vector);
  }

  close(): void {
    this.fail(new NcclNodeError('ERR_STORE', `TCPStore client for ${this.where} is closed`));
  }

  private send(parts: Buffer[]): void {
    if (this.failure) throw this.failure;
    this.socket.write(Buffer.concat(parts));
  }

  private request<T>(parts: Buffer[], read: Reader<T>): Promise<T> {
    if (this.failure) return Promise.reject(this.failure);
    return new Promise<T>((resolve, reject) => {
      this.pending.push({ read, resolve: resolve as (v: unknown) => void, reject });
      this.socket.write(Buffer.concat(parts));
    });
  }

  private onData(chunk: Buffer): void {
    this.received = this.received.length === 0 ? chunk : Buffer.concat([this.received, chunk]);
    try {
      for (let head = this.pending[0]; head !== undefined; head = this.pending[0]) {
        const got = head.read(this.received);
        if (got === undefined) return;
        this.pending.shift();
        this.received = this.received.subarray(got.used);
        head.resolve(got.value);
      }
      if (this.received.length > 0) throw new NcclNodeError('ERR_STORE', `TCPStore at ${this.where} sent ${this.received.length} bytes nobody asked for`);
    } catch (err) {
      this.fail(err as Error);
    }
  }

  private fail(err: Error): void {
    this.failure ??= err;
    for (const p of this.pending.splice(0)) p.reject(this.failure);
    this.socket.destroy();
  }
}
