/**
 * Open-loop load: requests arrive as a Poisson process at `rate` per second (seeded
 * exponential gaps), each sent at its arrival time whether or not earlier ones have
 * been answered, as real traffic does; a closed loop would slow its arrivals when
 * the server slows and hide the queueing it should measure.
 *
 * Per request, from the moment it is sent: TTFT (to the first token event, or to the
 * done event when no token was streamed), TPOT
 * (mean gap between token events after the first), end-to-end latency (to the done
 * event), and whether the completion is exactly the expected answer.
 */
import { Agent, request } from 'node:http';
import { mulberry32 } from '../util/prng.js';
import { percentileInterval, type Interval } from './stats.js';
import type { Problem } from './tasks.js';

export interface LoadOptions {
  url: string;
  problems: readonly Problem[];
  /** Requests per second offered. */
  rate: number;
  requests: number;
  seed: number;
  maxTokens?: number;
  /** Per request deadline (default 30 s): a request past it counts as failed. */
  timeoutMs?: number;
}

export interface RequestRecord {
  index: number;
  prompt: string;
  expected: string;
  /** When it was due and when it was sent, ms after the run started. */
  dueMs: number;
  sentMs: number;
  ttftMs: number | null;
  /** Mean gap between token events after the first; null with fewer than two tokens. */
  tpotMs: number | null;
  e2eMs: number | null;
  tokenEvents: number;
  text: string | null;
  correct: boolean;
  status: number | null;
  error?: string;
}

/** Seeded exponential inter-arrival gaps: arrival times in ms of a Poisson process at `rate`/s. */
export function poissonArrivals(requests: number, rate: number, seed: number): number[] {
  const rand = mulberry32(seed);
  const out: number[] = [];
  let t = 0;
  for (let i = 0; i < requests; i++) {
    t += (-Math.log(1 - rand()) / rate) * 1000;
    out.push(t);
  }
  return out;
}

/** The problem of request i: a seeded draw, so two runs with one seed send the same prompts in the same order. */
export function problemOrder(requests: number, count: number, seed: number): number[] {
  const rand = mulberry32(seed ^ 0x1a2b3c);
  return Array.from({ length: requests }, () => Math.floor(rand() * count));
}

export async function runLoad(o: LoadOptions): Promise<RequestRecord[]> {
  const arrivals = poissonArrivals(o.requests, o.rate, o.seed);
  const order = problemOrder(o.requests, o.problems.length, o.seed);
  const agent = new Agent({ keepAlive: true, maxSockets: Infinity });
  const t0 = performance.now();
  try {
    return await Promise.all(arrivals.map((due, index) => new Promise<RequestRecord>((resolve) => {
      // Timers have millisecond granularity and may fire a little early: wait out the rest.
      const fire = () => {
        const left = due - (performance.now() - t0);
        if (left > 0) setTimeout(fire, Math.ceil(left));
        else void one(o, o.problems[order[index]!]!, index, due, t0, agent).then(resolve);
      };
      fire();
    })));
  } finally {
    agent.destroy();
  }
}

function one(o: LoadOptions, p: Problem, index: number, dueMs: number, t0: number, agent: Agent): Promise<RequestRecord> {
  const body = JSON.stringify({ prompt: p.prompt, max_tokens: o.maxTokens ?? 4 });
  const sent = performance.now();
  const rec: RequestRecord = { index, prompt: p.prompt, expected: p.answer, dueMs, sentMs: sent - t0, ttftMs: null, tpotMs: null, e2eMs: null, tokenEvents: 0, text: null, correct: false, status: null };
  const tokenTimes: number[] = [];
  return new Promise((resolve) => {
    let settled = false;
    const finish = (error?: string) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      if (error) rec.error = error;
      rec.tokenEvents = tokenTimes.length;
      // A completion with no token events (an immediate newline) has its first content in the done event.
      if (tokenTimes.length) rec.ttftMs = tokenTimes[0]! - sent;
      else if (rec.e2eMs !== null) rec.ttftMs = rec.e2eMs;
      if (tokenTimes.length > 1) rec.tpotMs = (tokenTimes.at(-1)! - tokenTimes[0]!) / (tokenTimes.length - 1);
      resolve(rec);
    };
    const timer = setTimeout(() => {
      req.destroy();
      finish(`no answer within ${o.timeoutMs ?? 30_000} ms`);
    }, o.timeoutMs ?? 30_000);
    const req = request(`${o.url}/v1/completions`, { method: 'POST', agent, headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) } }, (res) => {
      rec.status = res.statusCode ?? null;
      res.setEncoding('utf8');
      let buf = '';
      res.on('data', (chunk: string) => {
        const now = performance.now();
        buf += chunk;
        // Server-sent events end with a blank line; handle every complete one.
        for (let end = buf.indexOf('\n\n'); end >= 0; end = buf.indexOf('\n\n')) {
          const ev = buf.slice(0, end);
          buf = buf.slice(end + 2);
          const name = /^event: (.*)$/m.exec(ev)?.[1];
          const data = /^data: (.*)$/m.exec(ev)?.[1];
          if (name === 'token') tokenTimes.push(now);
          else if (name === 'done' && data) {
            rec.e2eMs = now - sent;
            rec.text = (JSON.parse(data) as { text: string }).text;
            rec.correct = rec.text === p.answer;
          }
        }
      });
      res.on('end', () => finish(rec.status === 200 && rec.e2eMs !== null ? undefined : `HTTP ${rec.status}${rec.e2eMs === null ? ', no done event' : ''}`));
      res.on('error', (err) => finish(err.message));
    });
    req.on('error', (err) => finish(err.message));
    req.end(body);
  });
}

export interface LatencySummary { p50: Interval; p95: Interval; p99: Interval; mean: number; n: number }

export interface LoadSummary {
  requests: number;
  /** Requests answered with a done event. */
  completed: number;
  failed: number;
  correct: number;
  /** Exact-match accuracy over all requests (a failed request is not correct). */
  accuracy: number;
  ttftMs: LatencySummary | null;
  tpotMs: LatencySummary | null;
  e2eMs: LatencySummary | null;
  /** Fraction of all requests that completed with e2e latency within the SLO's p95 bound. */
  goodput: number;
  /** Offered and achieved rates, requests/s. */
  offeredRate: number;
  wallSeconds: number;
}

function latency(values: number[], seed: number): LatencySummary | null {
  if (values.length === 0) return null;
  const o = { seed, resamples: 1000 };
  return { p50: percentileInterval(values, 50, o), p95: percentileInterval(values, 95, o), p99: percentileInterval(values, 99, o), mean: values.reduce((a, b) => a + b, 0) / values.length, n: values.length };
}

export function summarize(records: readonly RequestRecord[], o: { rate: number; sloMs: number; seed?: number }): LoadSummary {
  const done = records.filter((r) => r.e2eMs !== null && !r.error);
  const pick = (f: (r: RequestRecord) => number | null) => done.map(f).filter((v): v is number => v !== null);
  const seed = o.seed ?? 1;
  const correct = records.filter((r) => r.correct).length;
  const end = Math.max(0, ...done.map((r) => r.sentMs + r.e2eMs!));
  return {
    requests: records.length, completed: done.length, failed: records.length - done.length, correct,
    accuracy: records.length ? correct / records.length : 0,
    ttftMs: latency(pick((r) => r.ttftMs), seed), tpotMs: latency(pick((r) => r.tpotMs), seed), e2eMs: latency(pick((r) => r.e2eMs), seed),
    goodput: records.length ? done.filter((r) => r.e2eMs! <= o.sloMs).length / records.length : 0,
    offeredRate: o.rate, wallSeconds: end / 1000,
  };
}
