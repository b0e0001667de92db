/**
 * Wire format of the rendezvous store (docs/rendezvous.md), shared by the server
 * and the TypeScript client. The C++ client (native/core/store_client.cpp) speaks
 * the same format; change both together.
 */

export const Op = { Auth: 1, Set: 2, Get: 3, Add: 4, Check: 5, Wait: 6, Delete: 7, Ping: 8 } as const;
export type Op = (typeof Op)[keyof typeof Op];

export const Status = { Ok: 0, Timeout: 1, Unauthorized: 2, BadRequest: 3, Closing: 4 } as const;
export type Status = (typeof Status)[keyof typeof Status];

const OP_NAMES: Record<number, string> = {
  1: 'AUTH', 2: 'SET', 3: 'GET', 4: 'ADD', 5: 'CHECK', 6: 'WAIT', 7: 'DELETE', 8: 'PING',
};

export function opName(op: number): string {
  return OP_NAMES[op] ?? `op ${op}`;
}

/** Largest body either side accepts. */
export const MAX_BODY_BYTES = 64 * 1024 * 1024;
/** Before AUTH succeeds a peer may only send small frames, so strangers cannot make the server buffer 64 MiB. */
export const MAX_PREAUTH_BODY_BYTES = 64 * 1024;
/** What a timeout of 0 on the wire means. */
export const DEFAULT_TIMEOUT_MS = 10 * 60 * 1000;
export const MAX_TIMEOUT_MS = 0xffff_ffff;

const I64_MIN = -(2n ** 63n);
const I64_MAX = 2n ** 63n - 1n;

export function inI64Range(v: bigint): boolean {
  return v >= I64_MIN && v <= I64_MAX;
}

/** Malformed or oversized data on the wire. */
export class ProtocolError extends Error {
  override readonly name = 'ProtocolError';
}

export class FrameTooLargeError extends ProtocolError {
  constructor(readonly size: number, readonly limit: number) {
    super(`frame of ${size} bytes exceeds the limit of ${limit} bytes`);
  }
}

export type Request =
  | { op: typeof Op.Auth; token: Uint8Array; clientName: string }
  | { op: typeof Op.Set; key: string; value: Uint8Array }
  | { op: typeof Op.Get; key: string; timeoutMs: number }
  | { op: typeof Op.Add; key: string; delta: bigint }
  | { op: typeof Op.Check; key: string }
  | { op: typeof Op.Wait; keys: string[]; timeoutMs: number }
  | { op: typeof Op.Delete; key: string }
  | { op: typeof Op.Ping };

/** Accumulates fields of one body; finish() prepends the length. */
export class FrameWriter {
  private readonly parts: Uint8Array[] = [];
  private size = 0;

  u8(v: number): this {
    return this.push(Buffer.of(v));
  }

  u32(v: number): this {
    const b = Buffer.allocUnsafe(4);
    b.writeUInt32LE(v);
    return this.push(b);
  }

  i64(v: bigint): this {
    const b = Buffer.allocUnsafe(8);
    b.writeBigInt64LE(v);
    return this.push(b);
  }

  bytes(v: Uint8Array | string): this {
    const data = typeof v === 'string' ? Buffer.from(v, 'utf8') : v;
    this.u32(data.length);
    return this.push(data);
  }

  /** Throws FrameTooLargeError rather than produce a frame the peer must refuse. */
  finish(limit = MAX_BODY_BYTES): Buffer {
    if (this.size > limit) throw new FrameTooLargeError(this.size, limit);
    const head = Buffer.allocUnsafe(4);
    head.writeUInt32LE(this.size);
    return Buffer.concat([head, ...this.parts], 4 + this.size);
  }

  private push(b: Uint8Array): this {
    this.parts.push(b);
    this.size += b.length;
    return this;
  }
}

const utf8 = new TextDecoder('utf-8', { fatal: true });

/** Reads the fields of one body; every read is bounds-checked. */
export class BodyReader {
  private pos = 0;

  constructor(private readonly buf: Buffer) {}

  u8(): number {
    this.need(1);
    return this.buf.readUInt8(this.pos++);
  }

  u32(): number {
    this.need(4);
    const v = this.buf.readUInt32LE(this.pos);
    this.pos += 4;
    return v;
  }

  i64(): bigint {
    this.need(8);
    const v = this.buf.readBigInt64LE(this.pos);
    this.pos += 8;
    return v;
  }

  /** A view into the body; copy it before keeping it. */
  bytes(): Buffer {
    const n = this.u32();
    this.need(n);
    const v = this.buf.subarray(this.pos, this.pos + n);
    this.pos += n;
    return v;
  }

  /** Keys must be valid UTF-8 so that byte keys and JS string keys map one to one. */
  string(): string {
    const raw = this.bytes();
    try {
      return utf8.decode(raw);
    } catch {
      throw new ProtocolError('string field is not valid UTF-8');
    }
  }

  end(): void {
    if (this.pos !== this.buf.length) {
      throw new ProtocolError(`${this.buf.length - this.pos} unexpected trailing bytes`);
    }
  }

  private need(n: number): void {
    if (this.pos + n > this.buf.length) {
      throw new ProtocolError(`truncated message: needs ${n} bytes at offset ${this.pos} of ${this.buf.length}`);
    }
  }
}

export function encodeRequest(req: Request, limit = MAX_BODY_BYTES): Buffer {
  const w = new FrameWriter().u8(req.op);
  switch (req.op) {
    case Op.Auth: w.bytes(req.token).bytes(req.clientName); break;
    case Op.Set: w.bytes(req.key).bytes(req.value); break;
    case Op.Get: w.bytes(req.key).u32(req.timeoutMs); break;
    case Op.Add: w.bytes(req.key).i64(req.delta); break;
    case Op.Check: w.bytes(req.key); break;
    case Op.Wait:
      w.u32(req.keys.length);
      for (const k of req.keys) w.bytes(k);
      w.u32(req.timeoutMs);
      break;
    case Op.Delete: w.bytes(req.key); break;
    case Op.Ping: break;
  }
  return w.finish(limit);
}

/** Parses a request body; throws ProtocolError on anything malformed. */
export function decodeRequest(body: Buffer): Request {
  const r = new BodyReader(body);
  const op = r.u8();
  let req: Request;
  switch (op) {
    case Op.Auth: {
      const token = r.bytes();
      // The name only ever goes into logs, so be lenient about its encoding.
      req = { op, token, clientName: r.bytes().toString('utf8') };
      break;
    }
    case Op.Set: req = { op, key: r.string(), value: r.bytes() }; break;
    case Op.Get: req = { op, key: r.string(), timeoutMs: r.u32() }; break;
    case Op.Add: req = { op, key: r.string(), delta: r.i64() }; break;
    case Op.Check: req = { op, key: r.string() }; break;
    case Op.Wait: {
      const n = r.u32();
      const keys: string[] = [];
      for (let i = 0; i < n; i++) keys.push(r.string());
      req = { op, keys, timeoutMs: r.u32() };
      break;
    }
    case Op.Delete: req = { op, key: r.string() }; break;
    case Op.Ping: req = { op }; break;
    default: throw new ProtocolError(`unknown op ${op}`);
  }
  r.end();
  return req;
}

/** A reply frame: status then an optional payload written by `payload`. */
export function encodeReply(status: Status, payload?: (w: FrameWriter) => void): Buffer {
  const w = new FrameWriter().u8(status);
  payload?.(w);
  return w.finish();
}

/**
 * Splits a byte stream into frame bodies. Bodies are handed to `onBody` one at a
 * time, so a handler that changes `maxBody` (after AUTH) affects the very next
 * frame header. Chunks are joined only once per frame, so large frames cost O(n).
 */
export class FrameParser {
  private chunks: Buffer[] = [];
  private buffered = 0;
  private expected: number | undefined;

  constructor(public maxBody: number) {}

  /** Throws FrameTooLargeError as soon as an oversized header is seen. */
  push(chunk: Buffer, onBody: (body: Buffer) => void): void {
    this.chunks.push(chunk);
    this.buffered += chunk.length;
    for (;;) {
      if (this.expected === undefined) {
        if (this.buffered < 4) return;
        const len = this.take(4).readUInt32LE(0);
        if (len > this.maxBody) throw new FrameTooLargeError(len, this.maxBody);
        this.expected = len;
      }
      if (this.buffered < this.expected) return;
      const body = this.take(this.expected);
      this.expected = undefined;
      onBody(body);
    }
  }

  private take(n: number): Buffer {
    this.buffered -= n;
    const first = this.chunks[0];
    if (first !== undefined && first.length >= n) {
      if (first.length === n) this.chunks.shift();
      else this.chunks[0] = first.subarray(n);
      return first.subarray(0, n);
    }
    const out = Buffer.allocUnsafe(n);
    let off = 0;
    while (off < n) {
      const c = this.chunks[0];
      if (c === undefined) throw new Error('FrameParser: buffered count out of sync');
      const k = Math.min(c.length, n - off);
      c.copy(out, off, 0, k);
      off += k;
      if (k === c.length) this.chunks.shift();
      else this.chunks[0] = c.subarray(k);
    }
    return out;
  }
}

/** `"a", "b" and 3 more`: names keys in messages without flooding logs. */
export function describeKeys(keys: readonly string[], max = 8): string {
  const shown = keys.slice(0, max).map((k) => JSON.stringify(k)).join(', ');
  return keys.length > max ? `${shown} and ${keys.length - max} more` : shown;
}
