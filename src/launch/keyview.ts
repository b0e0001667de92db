/**
 * The few store operations the launcher needs, over either the store it hosts in
 * its own process (node 0) or a TCP client (other nodes), so the gang logic is
 * written once.
 */
import { NcclNodeError } from '../errors.js';
import { StoreClient, type StoreClientOptions } from '../rendezvous/client.js';
import type { StoreServer } from '../rendezvous/server.js';

export interface KeyView {
  has(key: string): Promise<boolean>;
  /** The value as text, or undefined when the key is absent (never blocks). */
  read(key: string): Promise<string | undefined>;
  write(key: string, value: string): Promise<void>;
  /**
   * Resolves once every key exists. Rejects with ERR_TIMEOUT after timeoutMs
   * (Infinity: never), with an AbortError when `signal` aborts, and with ERR_STORE
   * when the store is lost.
   */
  waitAll(keys: readonly string[], timeoutMs: number, signal?: AbortSignal): Promise<void>;
  close(): Promise<void>;
}

const utf8 = new TextDecoder();
/** Longest single WAIT sent to a remote store; longer waits are repeated. */
const WAIT_CHUNK_MS = 10 * 60 * 1000;

function aborted(signal: AbortSignal): Error {
  return signal.reason instanceof Error ? signal.reason : new DOMException('aborted', 'AbortError');
}

function timeoutError(keys: readonly string[], timeoutMs: number): NcclNodeError {
  return new NcclNodeError('ERR_TIMEOUT', `timed out after ${timeoutMs} ms waiting for ${keys.length} key(s)`, { timeoutMs });
}

/** A view of the store this process hosts: no sockets, watches via onSet. */
export function serverView(server: StoreServer): KeyView {
  return {
    has: async (key) => server.has(key),
    read: async (key) => {
      const v = server.get(key);
      return v === undefined ? undefined : utf8.decode(v);
    },
    write: async (key, value) => server.set(key, value),
    waitAll: (keys, timeoutMs, signal) =>
      new Promise<void>((resolve, reject) => {
        if (signal?.aborted) return reject(aborted(signal));
        const missing = new Set(keys.filter((k) => !server.has(k)));
        if (missing.size === 0) return resolve();
        let timer: NodeJS.Timeout | undefined;
        const done = (err?: Error): void => {
          unsubscribe();
          clearTimeout(timer);
          signal?.removeEventListener('abort', onAbort);
          if (err) reject(err);
          else resolve();
        };
        const onAbort = (): void => done(aborted(signal as AbortSignal));
        const unsubscribe = server.onSet((key) => {
          if (missing.delete(key) && missing.size === 0) done();
        });
        if (Number.isFinite(timeoutMs)) timer = setTimeout(() => done(timeoutError(keys, timeoutMs)), timeoutMs);
        signal?.addEventListener('abort', onAbort, { once: true });
      }),
    close: async () => {},
  };
}

/**
 * A view over TCP. Blocking waits each get their own connection: replies on one
 * connection come in order, so a parked WAIT would hold up everything behind it.
 */
export async function clientView(options: StoreClientOptions): Promise<KeyView> {
  const main = await StoreClient.connect(options);
  const waiters = new Set<StoreClient>();
  return {
    has: (key) => main.check(key),
    read: async (key) => ((await main.check(key)) ? main.getString(key) : undefined),
    write: (key, value) => main.set(key, value),
    waitAll: async (keys, timeoutMs, signal) => {
      if (signal?.aborted) throw aborted(signal);
      const client = await StoreClient.connect({ ...options, connectTimeoutMs: 10_000 });
      waiters.add(client);
      const onAbort = (): void => void client.close();
      signal?.addEventListener('abort', onAbort, { once: true });
      try {
        if (signal?.aborted) throw aborted(signal); // while we were connecting
        const deadline = Date.now() + timeoutMs;
        for (;;) {
          const left = deadline - Date.now();
          if (left <= 0) throw timeoutError(keys, timeoutMs);
          try {
            await client.wait(keys, { timeoutMs: Math.max(1, Math.min(left, WAIT_CHUNK_MS)) });
            return;
          } catch (err) {
            if (signal?.aborted) throw aborted(signal);
            if (!(err instanceof NcclNodeError && err.code === 'ERR_TIMEOUT')) throw err;
          }
        }
      } finally {
        signal?.removeEventListener('abort', onAbort);
        waiters.delete(client);
        await client.close();
      }
    },
    close: async () => {
      await Promise.all([main.close(), ...[...waiters].map((c) => c.close())]);
    },
  };
}

/**
 * The keys of one store scope (src/rendezvous/scope.ts) as its ranks see them: the
 * launcher reads and writes `prefix + key` where a scoped rank says `key`.
 */
export function prefixedView(view: KeyView, prefix: string): KeyView {
  if (prefix === '') return view;
  return {
    has: (key) => view.has(prefix + key),
    read: (key) => view.read(prefix + key),
    write: (key, value) => view.write(prefix + key, value),
    waitAll: (keys, timeoutMs, signal) => view.waitAll(keys.map((k) => prefix + k), timeoutMs, signal),
    // The underlying view belongs to the launcher, which closes it once.
    close: async () => {},
  };
}
