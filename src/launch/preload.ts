/**
 * Orphan guard, loaded into every rank by `nccl-node run` with `node --import`.
 *
 * The launcher gives each rank one end of a socket pair (fd NCCL_NODE_LAUNCHER_FD)
 * and keeps the other. When the launcher dies, even by SIGKILL, the kernel closes
 * its end and we read EOF: we then SIGTERM this rank's process group (the rank and
 * anything it spawned), and SIGKILL it after the grace period if it is still there.
 *
 * The watch runs on a worker thread so that it fires even while the main thread is
 * stuck in a long synchronous loop; the worker is unref'd so it never keeps the
 * rank alive.
 */
import { Worker, isMainThread } from 'node:worker_threads';

// Plain JS on purpose: it runs in a worker without any loader.
const WATCH = `
const { workerData } = require('node:worker_threads');
const net = require('node:net');
const fs = require('node:fs');
const { fd, graceMs, pid } = workerData;
let fired = false;
function kill(sig) {
  try { process.kill(-pid, sig); } catch { try { process.kill(pid, sig); } catch {} }
}
function orphaned() {
  if (fired) return;
  fired = true;
  try { fs.writeSync(2, 'nccl-node: the launcher is gone; stopping this rank (pid ' + pid + ')\\n'); } catch {}
  kill('SIGTERM');
  setTimeout(() => kill('SIGKILL'), graceMs);
}
const sock = new net.Socket({ fd, readable: true, writable: false });
sock.on('data', () => {});
sock.on('end', orphaned);
sock.on('error', orphaned);
`;

function install(): void {
  const fdText = process.env['NCCL_NODE_LAUNCHER_FD'];
  const graceText = process.env['NCCL_NODE_GRACE_MS'];
  // Our own children are not watched through this fd; don't let them try.
  delete process.env['NCCL_NODE_LAUNCHER_FD'];
  delete process.env['NCCL_NODE_GRACE_MS'];
  if (!isMainThread || fdText === undefined) return;
  const fd = Number(fdText);
  if (!Number.isInteger(fd) || fd < 3) return;
  const graceMs = Number(graceText ?? '5000');
  const worker = new Worker(WATCH, {
    eval: true,
    execArgv: [], // not this process's --import list: the worker needs neither tsx nor this file
    workerData: { fd, graceMs: Number.isFinite(graceMs) && graceMs >= 0 ? graceMs : 5000, pid: process.pid },
    stdout: false,
    stderr: false,
  });
  worker.unref();
  worker.on('error', (err) => {
    process.stderr.write(`nccl-node: orphan guard failed: ${err.message}\n`);
  });
}

install();
