/**
 * A native communicator's submit() and submitSync() are functions of their own, which
 * find their communicator through the function's data rather than through `this`
 * (native/core/call_args.h): kept after the object is collected, they must refuse
 * the call with ERR_COMM_DESTROYED, not reach freed memory.
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

describe('native call methods', () => {
  it('work unbound, and refuse with ERR_COMM_DESTROYED once their communicator was collected', async () => {
    const { stdout } = await promisify(execFile)(process.execPath,
      ['--expose-gc', '--import', 'tsx', 'test/fixtures/native-method-kept.ts'], { cwd: ROOT, timeout: 60_000 });
    const got = JSON.parse(stdout.trim().split('\n').pop()!) as { before: [boolean, number]; collected: boolean; after: Record<string, string> };
    // One rank: the sum is the input, completed before submit() returned.
    expect(got.before).toEqual([true, 2]);
    expect(got.collected).toBe(true);
    expect(got.after).toEqual({ submit: 'ERR_COMM_DESTROYED', submitSync: 'ERR_COMM_DESTROYED' });
  }, 90_000);
});
