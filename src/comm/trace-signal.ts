/**
 * Every rank dumps its trace when any rank times out. A rank stuck before a collective
 * never times out itself, yet its record is the one that explains the hang (what it was
 * last doing), so a timeout is told to the others through the job's store, as
 * PyTorch's watchdog does: the timed-out rank adds 1 to a counter, and every rank polls
 * that counter (a non-blocking ADD 0, every NCCL_NODE_TRACE_POLL_MS, default 500 ms)
 * and dumps when it grew. The count it starts from is read first, so requests of an
 * earlier attempt of a restarted job are not answered again. A rank whose JS thread is
 * blocked answers when it returns to the event loop.
 */
import { dumpTraces, onOpTimeout } from './flight-record.js';

/** What the signal needs of the store client (src/rendezvous/client.ts). */
export interface CounterStore {
  add(key: string, delta: number): Promise<bigint>;
}

export const TRACE_REQUEST_KEY = 'nccl-node/trace/requests';

/** Starts answering dump requests; returns the stop function (call it before the store closes). */
export function watchTraceRequests(store: CounterStore): () => void {
  const poll = Number(process.env.NCCL_NODE_TRACE_POLL_MS) > 0 ? Number(process.env.NCCL_NODE_TRACE_POLL_MS) : 500;
  let seen: bigint | null = null;
  let stopped = false;
  let busy = false;
  const check = async (): Promise<void> => {
    if (busy || stopped) return;
    busy = true;
    try {
      const n = await store.add(TRACE_REQUEST_KEY, 0);
      if (seen !== null && n > seen && !stopped) {
        try {
          dumpTraces(`dump requested by another rank (request ${n})`);
        } catch (err) {
          process.emitWarning((err as Error).message, { code: 'NCCL_NODE_TRACE_DUMP' });
        }
      }
      seen = n;
    } catch {
      // The store went away (the job is ending): nothing left to answer.
      stop();
    } finally {
      busy = false;
    }
  };
  void check();
  const timer = setInterval(() => void check(), poll);
  timer.unref();
  const unsubscribe = onOpTimeout(() => {
    if (stopped) return;
    // Counted as seen here, so this rank does not dump twice for its own request.
    store.add(TRACE_REQUEST_KEY, 1).then((n) => { seen = n; }, () => {});
  });
  function stop(): void {
    if (stopped) return;
    stopped = true;
    clearInterval(timer);
    unsubscribe();
  }
  return stop;
}
