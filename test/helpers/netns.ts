/**
 * Several "machines" on one Linux host for multi-node tests: each node is a network
 * namespace with its own address, joined to the others by a veth pair into a bridge
 * that lives in a namespace of its own (the switch), so the host's own network is never
 * touched and concurrent runs cannot clash. Processes started with `spawnOn` run inside
 * a node's namespace (and UTS namespace: `os.hostname()` is the node's name), so the
 * launcher, its store and Gloo really talk over the veth addresses.
 *
 * Faults: `killNode` (SIGKILL everything in the namespace), `partition`/`heal` (the
 * node's switch port down/up: a black hole, no resets), `slow` (tc tbf on both ends of
 * the node's link; `unslow` removes it), `stopRank`/`contRank` (SIGSTOP/SIGCONT one
 * process), `killStoreHost`; `listenerPid` finds the process that listens on a port.
 *
 * Needs root and iproute2. Names are `ncn<pid>-...`, so namespaces left behind by a run
 * that died are recognised (their pid is gone) and deleted by the next `createCluster`.
 * Cleanup: `destroy()` (call it from afterEach/afterAll) and a process 'exit' hook.
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { randomBytes, randomInt } from 'node:crypto';
import { alive } from './cli.js';

const PREFIX = 'ncn';
const ipBin = 'ip';

export interface NetNode {
  index: number;
  /** The node's network namespace. */
  ns: string;
  /** Its address on the cluster's /24, and its host name. */
  addr: string;
  hostname: string;
  /** The node's end of its link (inside `ns`) and the switch's end (inside the switch namespace). */
  dev: string;
  port: string;
}

export interface Spawned {
  child: ChildProcess;
  node: NetNode;
  stdout: () => string;
  stderr: () => string;
  /** When it was started (Date.now()). */
  t0: number;
  /** Settles when it exited (or was SIGKILLed at the deadline given to spawnOn). */
  done: Promise<{ code: number | null; signal: NodeJS.Signals | null; at: number }>;
}

function ip(args: string[], quiet = false): string {
  try {
    return execFileSync(ipBin, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  } catch (err) {
    if (quiet) return '';
    const e = err as { stderr?: string; message: string };
    throw new Error(`ip ${args.join(' ')} failed: ${e.stderr?.trim() || e.message}`);
  }
}

function tc(ns: string, args: string[]): void {
  ip(['netns', 'exec', ns, 'tc', ...args]);
}


/** The pids of every process in namespace `ns`. */
export function nsPids(ns: string): number[] {
  return ip(['netns', 'pids', ns], true).split('\n').filter(Boolean).map(Number);
}

/** SIGKILLs everything in `ns` until nothing is left there (bounded: a fork bomb would not stop us). */
function killAll(ns: string): void {
  for (let i = 0; i < 50; i++) {
    const pids = nsPids(ns);
    if (pids.length === 0) return;
    for (const p of pids) {
      try {
        process.kill(p, 'SIGKILL');
      } catch {
        // Gone already.
      }
    }
    execFileSync('sleep', ['0.02']);
  }
}

function deleteNamespace(ns: string): void {
  killAll(ns);
  ip(['netns', 'del', ns], true);
}

/** Whether this process may create namespaces (root with iproute2). */
export function netnsAvailable(): boolean {
  if (process.getuid?.() !== 0) return false;
  try {
    ip(['netns', 'list']);
    return true;
  } catch {
    return false;
  }
}

/** Deletes namespaces of earlier runs whose process is gone. */
export function removeLeftovers(): string[] {
  const removed: string[] = [];
  for (const line of ip(['netns', 'list'], true).split('\n')) {
    const ns = line.split(' ')[0] ?? '';
    const m = new RegExp(`^${PREFIX}(\\d+)-`).exec(ns);
    if (m === null || alive(Number(m[1]))) continue;
    deleteNamespace(ns);
    removed.push(ns);
  }
  return removed;
}

export class Cluster {
  readonly nodes: NetNode[];
  /** The namespace holding the bridge. */
  readonly switchNs: string;
  readonly subnet: string;
  private readonly spawned = new Set<Spawned>();
  private destroyed = false;
  private readonly onExit = (): void => this.destroy();

  constructor(readonly name: string, count: number) {
    const [a, b] = [randomInt(0, 256), randomInt(0, 256)];
    this.subnet = `10.${a}.${b}.0/24`;
    this.switchNs = `${name}-sw`;
    this.nodes = Array.from({ length: count }, (_, i) => ({
      index: i,
      ns: `${name}-n${i}`,
      addr: `10.${a}.${b}.${i + 1}`,
      hostname: `${name}-n${i}`,
      dev: 'eth0',
      port: `p${i}`,
    }));
    process.on('exit', this.onExit);
    try {
      this.build();
    } catch (err) {
      this.destroy();
      throw err;
    }
  }

  private build(): void {
    const sw = this.switchNs;
    ip(['netns', 'add', sw]);
    ip(['-n', sw, 'link', 'add', 'br0', 'type', 'bridge']);
    ip(['-n', sw, 'link', 'set', 'br0', 'up']);
    for (const n of this.nodes) {
      ip(['netns', 'add', n.ns]);
      ip(['-n', sw, 'link', 'add', n.port, 'type', 'veth', 'peer', 'name', n.dev, 'netns', n.ns]);
      ip(['-n', sw, 'link', 'set', n.port, 'master', 'br0', 'up']);
      ip(['-n', n.ns, 'addr', 'add', `${n.addr}/24`, 'dev', n.dev]);
      ip(['-n', n.ns, 'link', 'set', n.dev, 'up']);
      ip(['-n', n.ns, 'link', 'set', 'lo', 'up']);
    }
  }

  /** The node that hosts the job's store by convention: node 0 (the --master-addr / --rdzv-endpoint). */
  get storeNode(): NetNode {
    return this.nodes[0]!;
  }

  /**
   * Runs `cmd args` inside `node` (its network and a UTS namespace named after it),
   * collecting its output; SIGKILLed after `timeoutMs` so nothing outlives a test.
   */
  spawnOn(node: NetNode, cmd: string, args: string[], opts: { env?: NodeJS.ProcessEnv; cwd?: string; timeoutMs?: number } = {}): Spawned {
    const argv = ['netns', 'exec', node.ns, 'unshare', '--uts', '--', 'sh', '-c', 'hostname "$0" && exec "$@"', node.hostname, cmd, ...args];
    const child = spawn(ipBin, argv, { cwd: opts.cwd, env: opts.env ?? process.env, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout!.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr!.on('data', (d: Buffer) => (err += d.toString()));
    const t0 = Date.now();
    const done = new Promise<{ code: number | null; signal: NodeJS.Signals | null; at: number }>((resolve) => {
      const timer = setTimeout(() => child.kill('SIGKILL'), opts.timeoutMs ?? 60_000);
      child.on('close', (code, signal) => {
        clearTimeout(timer);
        resolve({ code, signal, at: Date.now() });
      });
    });
    const s: Spawned = { child, node, stdout: () => out, stderr: () => err, t0, done };
    this.spawned.add(s);
    return s;
  }

  /** Bytes through the node's end of its link so far (the kernel's counters). */
  linkBytes(node: NetNode): { tx: number; rx: number } {
    const j = JSON.parse(ip(['-n', node.ns, '-s', '-j', 'link', 'show', 'dev', node.dev])) as Array<{ stats64: { tx: { bytes: number }; rx: { bytes: number } } }>;
    const s = j[0]!.stats64;
    return { tx: s.tx.bytes, rx: s.rx.bytes };
  }

  // ---- faults ----

  /** The machine dies: SIGKILL every process in the node's namespace. */
  killNode(node: NetNode): void {
    killAll(node.ns);
  }

  killStoreHost(): void {
    this.killNode(this.storeNode);
  }

  /** The node's switch port goes down: its packets vanish both ways, nobody gets a reset. */
  partition(node: NetNode): void {
    ip(['-n', this.switchNs, 'link', 'set', node.port, 'down']);
  }

  heal(node?: NetNode): void {
    for (const n of node ? [node] : this.nodes) ip(['-n', this.switchNs, 'link', 'set', n.port, 'up']);
  }

  /** Limits the node's link to `rate` (tc syntax, e.g. "4mbit") in both directions with tbf. */
  slow(node: NetNode, rate: string): void {
    const tbf = ['root', 'tbf', 'rate', rate, 'burst', '32kbit', 'latency', '400ms'];
    tc(node.ns, ['qdisc', 'replace', 'dev', node.dev, ...tbf]);
    tc(this.switchNs, ['qdisc', 'replace', 'dev', node.port, ...tbf]);
  }

  /**
   * Removes what `slow` added (both ends back to the kernel's default qdisc). Without a
   * node: every node. Quiet where nothing was added, so cleanup paths may always call it.
   */
  unslow(node?: NetNode): void {
    for (const n of node ? [node] : this.nodes) {
      ip(['netns', 'exec', n.ns, 'tc', 'qdisc', 'del', 'dev', n.dev, 'root'], true);
      ip(['netns', 'exec', this.switchNs, 'tc', 'qdisc', 'del', 'dev', n.port, 'root'], true);
    }
  }

  /** The qdisc kinds at the root of the node's link, its end then the switch's (e.g. ['tbf', 'tbf'] while slowed). */
  rootQdiscs(node: NetNode): string[] {
    const kind = (ns: string, dev: string): string => {
      const j = JSON.parse(ip(['netns', 'exec', ns, 'tc', '-j', 'qdisc', 'show', 'dev', dev, 'root'])) as Array<{ kind: string }>;
      return j[0]?.kind ?? 'none';
    };
    return [kind(node.ns, node.dev), kind(this.switchNs, node.port)];
  }

  /** The pid of the process listening on TCP `port` inside `node` (ss), or undefined if none. */
  listenerPid(node: NetNode, port: number): number | undefined {
    const out = ip(['netns', 'exec', node.ns, 'ss', '-Hltnp', `sport = :${port}`], true);
    const m = /pid=(\d+)/.exec(out);
    return m ? Number(m[1]) : undefined;
  }

  /** Freezes one process (a hung rank) until contRank. */
  stopRank(pid: number): void {
    process.kill(pid, 'SIGSTOP');
  }

  contRank(pid: number): void {
    process.kill(pid, 'SIGCONT');
  }

  /** Everything started on any node: killed. Namespaces stay (see destroy). */
  killAll(): void {
    for (const n of this.nodes) killAll(n.ns);
    for (const s of this.spawned) if (s.child.exitCode === null && s.child.signalCode === null) s.child.kill('SIGKILL');
    this.spawned.clear();
  }

  /** Kills every process in the cluster and deletes its namespaces, their links and qdiscs with them (idempotent, synchronous). */
  destroy(): void {
    if (this.destroyed) return;
    this.destroyed = true;
    this.killAll();
    for (const n of this.nodes) deleteNamespace(n.ns);
    deleteNamespace(this.switchNs);
    process.off('exit', this.onExit);
  }
}

/**
 * A cluster of `count` nodes named after this process, plus a random suffix (test files in
 * worker threads share a pid); leftovers of dead runs are removed first.
 */
export function createCluster(count: number, tag = 'c'): Cluster {
  removeLeftovers();
  return new Cluster(`${PREFIX}${process.pid}-${tag}${randomBytes(2).toString('hex')}`, count);
}
