/**
 * Copies a rank's output to ours one whole line at a time with a "[rank] " prefix,
 * so lines from different ranks never interleave mid-line.
 */
import type { Readable, Writable } from 'node:stream';

/** A line longer than this is passed on in pieces rather than held without bound. */
const MAX_HELD_BYTES = 64 * 1024;
const NL = 0x0a;
/** Sources paused until each output drains; one 'drain' listener per output however many ranks. */
const pausedOn = new WeakMap<Writable, Set<Readable>>();

function pauseUntilDrain(src: Readable, out: Writable): void {
  let paused = pausedOn.get(out);
  if (paused === undefined) {
    const set = new Set<Readable>();
    paused = set;
    pausedOn.set(out, set);
    out.once('drain', () => {
      pausedOn.delete(out);
      for (const s of set) s.resume();
    });
  }
  paused.add(src);
  src.pause();
}

/**
 * Pipes `src` into `out`, prefixing every line. A partial last line is held until
 * its newline or until `src` ends (then it gets a newline). Pauses `src` while `out`
 * is congested. Resolves when `src` has ended or closed.
 */
export function pipePrefixed(src: Readable, out: Writable, prefix: string): Promise<void> {
  const head = Buffer.from(prefix, 'utf8');
  let held: Buffer = Buffer.alloc(0);

  const emit = (line: Buffer): void => {
    if (!out.write(Buffer.concat([head, line])) && !src.isPaused()) pauseUntilDrain(src, out);
  };

  src.on('data', (chunk: Buffer) => {
    let data = held.length > 0 ? Buffer.concat([held, chunk]) : chunk;
    let nl = data.indexOf(NL);
    while (nl !== -1) {
      emit(data.subarray(0, nl + 1));
      data = data.subarray(nl + 1);
      nl = data.indexOf(NL);
    }
    while (data.length > MAX_HELD_BYTES) {
      emit(Buffer.concat([data.subarray(0, MAX_HELD_BYTES), Buffer.from('\n')]));
      data = data.subarray(MAX_HELD_BYTES);
    }
    // Copy: a subarray would keep the whole chunk alive.
    held = Buffer.from(data);
  });

  return new Promise<void>((resolve) => {
    let finished = false;
    const finish = (): void => {
      if (finished) return;
      finished = true;
      if (held.length > 0) emit(Buffer.concat([held, Buffer.from('\n')]));
      held = Buffer.alloc(0);
      resolve();
    };
    src.on('end', finish);
    src.on('close', finish);
    src.on('error', finish);
  });
}
