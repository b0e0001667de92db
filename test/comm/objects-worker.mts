// One rank of test/comm/objects.test.ts: allGatherObject / broadcastObject on the
// backend named by BACKEND (gloo, or nccl on the stand-ins). Every rank computes
// every rank's value itself, so each result is checked against a local reference.
// Prints one line: RESULT <json>.
import { isDeepStrictEqual } from 'node:util';
import { init, isNcclNodeError } from '../../src/index.js';

const rank = Number(process.env.RANK);
const n = Number(process.env.WORLD_SIZE);
const backend = process.env.BACKEND as 'gloo' | 'nccl';
const failures: string[] = [];
let cases = 0;

function check(what: string, got: unknown, expected: unknown): void {
  cases++;
  if (!isDeepStrictEqual(got, expected)) {
    failures.push(`${what}: got ${JSON.stringify(got)?.slice(0, 300)} expected ${JSON.stringify(expected)?.slice(0, 300)}`);
  }
}

/** Rank r's value: sizes differ per rank (rank 1's is ~100 KB), with multi-byte UTF-8 and nesting. */
function valueOf(r: number) {
  return {
    rank: r,
    text: 'grüße, 你好, 😀 '.repeat(r * 37 + 1),
    big: r === 1 ? 'x'.repeat(100_000) : '',
    nested: { list: Array.from({ length: r * 50 }, (_, i) => i * r), deep: { a: [{ b: r, c: null }, [true, false]] } },
    float: 1 / (r + 3),
  };
}

async function main() {
  const comm = await init({ backend, timeoutMs: 20000 });
  try {
    const all = await comm.allGatherObject(valueOf(rank));
    check('allGatherObject of nested values', all, Array.from({ length: n }, (_, r) => valueOf(r)));
    check('allGatherObject of strings', await comm.allGatherObject('ü'.repeat(rank)), Array.from({ length: n }, (_, r) => 'ü'.repeat(r)));
    check('allGatherObject of scalars', await comm.allGatherObject(rank % 2 ? null : rank * 1.5), Array.from({ length: n }, (_, r) => (r % 2 ? null : r * 1.5)));
    const root = n - 1;
    const fromRoot = await comm.broadcastObject(rank === root ? valueOf(root) : { ignored: rank }, { root });
    check(`broadcastObject from rank ${root}`, fromRoot, valueOf(root));
    check('broadcastObject of a unicode string', await comm.broadcastObject(rank === 0 ? 'ƒ😀ø' : 'zzzz'), 'ƒ😀ø');
    check('broadcastObject of an empty string', await comm.broadcastObject(rank === 0 ? '' : 'not me'), '');
    // A value JSON cannot encode on one rank fails the call on every rank, and the
    // communicator stays in step for the next call.
    let code: string | undefined;
    try {
      await comm.allGatherObject(rank === 1 ? { n: 1n } : { n: rank });
    } catch (err) {
      code = isNcclNodeError(err) ? `${err.code} ${/rank 1/.test(err.message)}` : String(err);
    }
    check('allGatherObject with a BigInt on rank 1', code, 'ERR_INVALID_ARGUMENT true');
    code = undefined;
    try {
      await comm.broadcastObject(rank === 0 ? undefined : 5);
    } catch (err) {
      code = isNcclNodeError(err) ? err.code : String(err);
    }
    check('broadcastObject of undefined at the root', code, 'ERR_INVALID_ARGUMENT');
    check('allGatherObject after the failures', await comm.allGatherObject([rank]), Array.from({ length: n }, (_, r) => [r]));
    console.log(`RESULT ${JSON.stringify({ rank, backend: comm.backend, cases, failures })}`);
    await comm.destroy();
  } catch (err) {
    console.log(`RESULT ${JSON.stringify({ fatal: { code: (err as { code?: string }).code, message: (err as Error).message } })}`);
    comm.abort();
    process.exitCode = 1;
  }
}

await main();
