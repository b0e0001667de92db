/**
 * The inference server process (started by startServer() in serve.ts, which passes
 * its ServeSpec in the environment). As the node:cluster primary it forks the
 * workers, reports the shared port once all of them listen, replaces a worker that
 * dies, and stops them all on SIGTERM or when its parent goes away. As a worker it
 * loads the checkpoint and the vocabulary and serves completions.
 */
import cluster from 'node:cluster';
import type { AddressInfo } from 'node:net';
import { loadModel } from './generate.js';
import { completionServer, SPEC_ENV, type ServeSpec } from './serve.js';
import { CompactVocab } from './vocab.js';

const spec = JSON.parse(process.env[SPEC_ENV] ?? 'null') as ServeSpec | null;
if (!spec) throw new Error(`serve-main: ${SPEC_ENV} is not set (start the server with startServer())`);
const send = (m: unknown) => process.send?.(m);

if (cluster.isPrimary) {
  let stopping = false;
  let ready = 0;
  const stop = () => {
    if (stopping) return;
    stopping = true;
    const live = Object.values(cluster.workers ?? {});
    if (live.length === 0) process.exit(0);
    for (const w of live) w?.kill('SIGTERM');
    cluster.on('exit', () => Object.keys(cluster.workers ?? {}).length === 0 && process.exit(0));
    setTimeout(() => process.exit(0), 3000).unref(); // a worker stuck in a long decode does not hold the exit
  };
  const start = () => {
    const w = cluster.fork();
    w.on('message', (m: { listening?: number; error?: string }) => {
      if (m.error) send({ error: m.error });
      else if (m.listening !== undefined && ++ready === spec.workers) send({ ready: m.listening });
    });
  };
  cluster.on('exit', (w, code, signal) => {
    if (stopping) return;
    process.stdout.write(`worker ${w.process.pid} exited (${code ?? signal}); starting another\n`);
    if (ready >= spec.workers) start(); // only replace a worker that had started; a failed load was reported
  });
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
  process.on('disconnect', stop); // the parent is gone: nobody will stop us
  for (let i = 0; i < spec.workers; i++) start();
} else {
  try {
    const [model, vocab] = await Promise.all([loadModel(spec.checkpoint, spec.model), CompactVocab.read(spec.vocabPath)]);
    const server = completionServer(model, vocab, { checkpoint: spec.checkpoint });
    server.keepAliveTimeout = 30_000;
    server.listen(spec.port, spec.host, () => send({ listening: (server.address() as AddressInfo).port }));
    process.on('SIGTERM', () => process.exit(0));
  } catch (err) {
    send({ error: `worker ${process.pid}: ${(err as Error).message}` });
    process.exitCode = 1;
    cluster.worker?.disconnect();
  }
}
