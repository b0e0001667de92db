/**
 * The job's store, hosted by a rank process (rank 0 without a launcher, or under
 * torchrun) on a thread of its own. A rank's JS thread can be held for a long time: a
 * blocking call (allReduceSync) waits there for the other ranks, a long synchronous
 * step computes there. A store served from that thread's event loop answers nobody
 * meanwhile, so a peer still reading keys (the end of init, of a split) waits for the
 * rank that waits for it, until the timeout. torch's TCPStore serves from a thread of
 * its own too.
 *
 * The thread runs store-thread-main.ts: the compiled file in an installed package; in a
 * source checkout its TypeScript bundled once per process with esbuild (tsx's own
 * compiler, there with it), since Node 20's worker threads do not take tsx's loader.
 */
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import { NcclNodeError, type ErrorCode } from '../errors.js';
import { StoreServer, type StoreServerOptions } from './server.js';
import type { StoreThreadMessage } from './store-thread-main.js';

/** What the ranks' code needs of a store it hosts (also a StoreServer's). */
export interface HostedStore {
  readonly port: number;
  close(): Promise<void>;
}

/** How long close() waits for the thread to close its connections before ending it. */
const CLOSE_WAIT_MS = 5_000;

let bundled: string | undefined;
let warnedNoThread = false;

function workerSource(): { code: string; eval: true } | { url: URL; eval: false } {
  const here = import.meta.url;
  if (!here.endsWith('.ts')) return { url: new URL('./store-thread-main.js', here), eval: false };
  if (bundled === undefined) {
    const esbuild = createRequire(here)('esbuild') as typeof import('esbuild');
    const out = esbuild.buildSync({
      entryPoints: [fileURLToPath(new URL('./store-thread-main.ts', here))],
      bundle: true, platform: 'node', format: 'cjs', target: 'node20', write: false, logLevel: 'silent',
    });
    bundled = out.outputFiles[0]!.text;
  }
  return { code: bundled, eval: true };
}

export class StoreThread implements HostedStore {
  readonly #worker: Worker;
  readonly #port: number;
  readonly #host: string;
  #closing: Promise<void> | undefined;

  private constructor(worker: Worker, port: number, host: string) {
    this.#worker = worker;
    this.#port = port;
    this.#host = host;
  }

  /**
   * Starts a StoreServer on a new thread; rejects as StoreServer.start() would. Where
   * the thread's code cannot be made (a source checkout run by a tsx without esbuild
   * beside it), the server starts on this thread, with a warning.
   */
  static async start(options: Omit<StoreServerOptions, 'log'>): Promise<HostedStore> {
    let src: ReturnType<typeof workerSource>;
    try {
      src = workerSource();
    } catch (err) {
      if (!warnedNoThread) {
        warnedNoThread = true;
        process.emitWarning(`the job's store runs on the rank's own thread (its thread's code could not be built: ${String((err as Error).message).split('\n')[0]}); ` +
          "a blocking call on this rank then holds up the other ranks' store requests", { code: 'NCCL_NODE_STORE_THREAD' });
      }
      return StoreServer.start(options);
    }
    const worker = new Worker(src.eval ? src.code : src.url, { eval: src.eval, workerData: options, execArgv: [] });
    return new Promise<StoreThread>((resolve, reject) => {
      const fail = (err: Error): void => {
        void worker.terminate();
        reject(err);
      };
      const onExit = (code: number): void => fail(new NcclNodeError('ERR_STORE', `the store's thread exited (code ${code}) before it listened`));
      worker.once('error', fail);
      worker.once('exit', onExit);
      worker.once('message', (m: StoreThreadMessage) => {
        worker.off('error', fail);
        worker.off('exit', onExit);
        if ('started' in m) {
          // Later failures of the thread (none expected) are reported, never thrown into the rank.
          worker.on('error', (err) => console.error(`nccl-node store: its thread failed: ${err.message}`));
          resolve(new StoreThread(worker, m.started.port, m.started.host));
        } else if ('failed' in m) {
          fail(new NcclNodeError((m.failed.code ?? 'ERR_STORE') as ErrorCode, m.failed.message, m.failed.details as Record<string, unknown>));
        }
      });
    });
  }

  /** The port listened on (the real one when started with port 0). */
  get port(): number {
    return this.#port;
  }

  /** The address listened on. */
  get host(): string {
    return this.#host;
  }

  /** As StoreServer.close(), then ends the thread. Idempotent. */
  close(): Promise<void> {
    this.#closing ??= new Promise<void>((resolve) => {
      const done = (): void => {
        clearTimeout(timer);
        void this.#worker.terminate().then(() => resolve(), () => resolve());
      };
      const timer = setTimeout(done, CLOSE_WAIT_MS);
      this.#worker.on('message', (m: StoreThreadMessage) => {
        if ('closed' in m) done();
      });
      this.#worker.once('exit', done);
      this.#worker.postMessage('close');
    });
    return this.#closing;
  }
}
