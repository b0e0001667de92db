/**
 * The worker side of store-thread.ts: runs a StoreServer on this thread and answers
 * the rank's thread's messages ('close'). Written without top-level await: in a
 * source checkout it runs as a CommonJS bundle (store-thread.ts).
 */
import { parentPort, workerData } from 'node:worker_threads';
import { StoreServer, type StoreServerOptions } from './server.js';

/** What this thread tells the rank's thread. */
export type StoreThreadMessage =
  | { started: { port: number; host: string } }
  | { failed: { code: string | undefined; message: string; details: unknown } }
  | { closed: true };

async function main(): Promise<void> {
  const port = parentPort!;
  const post = (m: StoreThreadMessage): void => port.postMessage(m);
  let server: StoreServer;
  try {
    server = await StoreServer.start(workerData as StoreServerOptions);
  } catch (err) {
    const e = err as { code?: string; message?: string; details?: unknown };
    post({ failed: { code: e.code, message: e.message ?? String(err), details: e.details } });
    port.close();
    return;
  }
  port.on('message', (m: unknown) => {
    if (m !== 'close') return;
    void server.close().then(() => {
      post({ closed: true });
      port.close();
    });
  });
  post({ started: { port: server.port, host: server.host } });
}

void main();
