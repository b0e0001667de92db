/**
 * Each rank is spawned detached, so it leads its own process group; signalling the
 * group reaches the rank and whatever it spawned, which signalling the pid would miss.
 */
import os from 'node:os';

/** Sends `signal` to the group led by `pgid`; false when the group is gone. */
export function killGroup(pgid: number, signal: NodeJS.Signals): boolean {
  try {
    process.kill(-pgid, signal);
    return true;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ESRCH') return false;
    // EPERM: a member changed identity (setuid); the leader itself is still ours.
    try {
      process.kill(pgid, signal);
      return true;
    } catch {
      return false;
    }
  }
}

/** Whether any process of the group still exists. */
export function groupAlive(pgid: number): boolean {
  try {
    process.kill(-pgid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** The shell's convention for a death by signal: 128 + its number (SIGKILL -> 137). */
export function signalExitCode(signal: NodeJS.Signals): number {
  const n = os.constants.signals[signal] as number | undefined;
  return n === undefined ? 255 : Math.min(255, 128 + n);
}
