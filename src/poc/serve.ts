/**
 * The inference server: plain node:http, one model per worker process.
 *
 *   POST /v1/completions {"prompt": "13+19=", "max_tokens": 4}
 *     200, text/event-stream: one `event: token` per generated token as it is produced
 *     (data {"index", "id", "text"}), then `event: done` (data {"text", "tokens", "finish"}).
 *   GET /health  200 {"status": "ok", "pid", "checkpoint"}
 *
 * A bad request gets a 400 with {"error": {"code", "message"}}, codes stable:
 * invalid_json, missing_prompt, invalid_prompt, invalid_max_tokens, body_too_large;
 * unknown paths not_found (404), other methods method_not_allowed (405).
 *
 * startServer() runs src/poc/serve-main.ts as a separate process: a node:cluster
 * primary whose workers each load the checkpoint and share one port (the primary
 * hands connections out round-robin), so completions run on several cores while
 * each worker decodes its requests token by token, interleaved.
 */
import { fork, type ChildProcess } from 'node:child_process';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { fileURLToPath } from 'node:url';
import { NcclNodeError } from '../errors.js';
import type { LanguageModel, ModelConfig } from '../models/language-model.js';
import { generate } from './generate.js';
import type { CompactVocab } from './vocab.js';

/** Largest request body accepted, and the max_tokens range. */
export const MAX_BODY_BYTES = 64 * 1024;
export const MAX_TOKENS_LIMIT = 256;
export const DEFAULT_MAX_TOKENS = 16;

export type ErrorCode = 'invalid_json' | 'missing_prompt' | 'invalid_prompt' | 'invalid_max_tokens' | 'body_too_large' | 'not_found' | 'method_not_allowed';

function reject(res: ServerResponse, status: number, code: ErrorCode, message: string): void {
  const body = JSON.stringify({ error: { code, message } });
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
  res.end(body);
}

/** The body, or null (and a 413-style 400 already sent) when it is over MAX_BODY_BYTES. */
async function readBody(req: IncomingMessage, res: ServerResponse): Promise<string | null> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > MAX_BODY_BYTES) {
      res.setHeader('connection', 'close'); // the rest of the body is not read
      reject(res, 400, 'body_too_large', `request body over ${MAX_BODY_BYTES} bytes`);
      return null;
    }
    chunks.push(chunk);
  }
  return Buffer.concat(chunks).toString('utf8');
}

/** What a request asks for, or the 400 it gets. */
export function parseCompletionRequest(body: string): { prompt: string; maxTokens: number } | { status: 400; code: ErrorCode; message: string } {
  let json: unknown;
  try {
    json = JSON.parse(body);
  } catch (err) {
    return { status: 400, code: 'invalid_json', message: `expected a JSON object: ${(err as Error).message}` };
  }
  if (typeof json !== 'object' || json === null || Array.isArray(json)) {
    return { status: 400, code: 'invalid_json', message: `expected a JSON object, received ${json === null ? 'null' : Array.isArray(json) ? 'an array' : typeof json}` };
  }
  const { prompt, max_tokens: max } = json as { prompt?: unknown; max_tokens?: unknown };
  if (prompt === undefined) return { status: 400, code: 'missing_prompt', message: 'expected "prompt": a non-empty string' };
  if (typeof prompt !== 'string' || prompt.length === 0) return { status: 400, code: 'invalid_prompt', message: `expected "prompt" to be a non-empty string, received ${JSON.stringify(prompt)}` };
  if (max !== undefined && !(Number.isInteger(max) && (max as number) >= 1 && (max as number) <= MAX_TOKENS_LIMIT)) {
    return { status: 400, code: 'invalid_max_tokens', message: `expected "max_tokens" to be an integer in 1..${MAX_TOKENS_LIMIT}, received ${JSON.stringify(max)}` };
  }
  return { prompt, maxTokens: (max as number | undefined) ?? DEFAULT_MAX_TOKENS };
}

const sse = (res: ServerResponse, event: string, data: unknown) => res.write(`event: ${event}\ndata: ${JSON.stringify(data)}\n\n`);

/** An HTTP server answering completions with `model` (not listening yet). */
export function completionServer(model: LanguageModel, vocab: CompactVocab, info: { checkpoint: string }): Server {
  return createServer((req, res) => {
    void (async () => {
      const path = (req.url ?? '/').split('?')[0];
      if (path === '/health') {
        if (req.method !== 'GET') return reject(res, 405, 'method_not_allowed', `GET /health, received ${req.method}`);
        const body = JSON.stringify({ status: 'ok', pid: process.pid, checkpoint: info.checkpoint });
        res.writeHead(200, { 'content-type': 'application/json' });
        return res.end(body);
      }
      if (path !== '/v1/completions') return reject(res, 404, 'not_found', `no route ${path}: POST /v1/completions, GET /health`);
      if (req.method !== 'POST') return reject(res, 405, 'method_not_allowed', `POST /v1/completions, received ${req.method}`);
      const body = await readBody(req, res);
      if (body === null) return;
      const parsed = parseCompletionRequest(body);
      if ('code' in parsed) return reject(res, parsed.status, parsed.code, parsed.message);
      res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
      res.flushHeaders();
      const it = generate(model, vocab, parsed.prompt, { maxTokens: parsed.maxTokens });
      let index = 0;
      for (;;) {
        if (res.destroyed) return; // the client went away: stop decoding for it
        const r = await it.next();
        if (r.done) {
          sse(res, 'done', { text: r.value.text, tokens: r.value.tokens.length, finish: r.value.finish });
          return res.end();
        }
        sse(res, 'token', { index: index++, id: r.value.id, text: r.value.text });
      }
    })().catch((err: Error) => {
      // A failure inside one request ends that request, never the worker.
      if (!res.headersSent) {
        const body = JSON.stringify({ error: { code: 'internal', message: err.message } });
        res.writeHead(500, { 'content-type': 'application/json' });
        res.end(body);
      } else res.destroy(err);
    });
  });
}

export interface ServerOptions {
  /** Checkpoint directory (one checkpoint, or a root: its newest). */
  checkpoint: string;
  model: ModelConfig;
  vocabPath: string;
  workers: number;
  /** Port to listen on (default 0: any free port, reported back). */
  port?: number;
  host?: string;
  /** Deadline for every worker to load and listen. */
  startTimeoutMs?: number;
  log?: (line: string) => void;
}

/** What serve-main.ts reads from its environment. */
export interface ServeSpec { checkpoint: string; model: ModelConfig; vocabPath: string; workers: number; port: number; host: string }
export const SPEC_ENV = 'NCCL_NODE_SERVE_SPEC';

export interface RunningServer {
  url: string;
  port: number;
  pid: number;
  /** Stops the primary and its workers; resolves once the primary exited. */
  close(): Promise<void>;
}

const entry = fileURLToPath(new URL(`./serve-main${import.meta.url.endsWith('.ts') ? '.ts' : '.js'}`, import.meta.url));

/** Starts the server process and resolves once every worker listens. */
export async function startServer(o: ServerOptions): Promise<RunningServer> {
  if (!Number.isInteger(o.workers) || o.workers < 1) throw new NcclNodeError('ERR_INVALID_ARGUMENT', `serve: workers must be a positive integer, received ${o.workers}`);
  const spec: ServeSpec = { checkpoint: o.checkpoint, model: o.model, vocabPath: o.vocabPath, workers: o.workers, port: o.port ?? 0, host: o.host ?? '127.0.0.1' };
  const execArgv = entry.endsWith('.ts') ? ['--import', import.meta.resolve('tsx')] : [];
  const child: ChildProcess = fork(entry, [], { execArgv, env: { ...process.env, [SPEC_ENV]: JSON.stringify(spec) }, stdio: ['ignore', 'pipe', 'pipe', 'ipc'] });
  let stderr = '';
  child.stderr!.on('data', (d: Buffer) => (stderr = (stderr + d.toString()).slice(-4000)));
  child.stdout!.on('data', (d: Buffer) => o.log?.(d.toString().trimEnd()));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const timeoutMs = o.startTimeoutMs ?? 60_000;
  const port = await new Promise<number>((resolve, reject) => {
    const timer = setTimeout(() => fail(new NcclNodeError('ERR_TIMEOUT', `serve: workers not listening within ${timeoutMs} ms\n${stderr}`)), timeoutMs);
    const fail = (err: Error) => {
      clearTimeout(timer);
      child.kill('SIGKILL');
      reject(err);
    };
    child.on('message', (m: { ready?: number; error?: string }) => {
      if (m.error) fail(new NcclNodeError('ERR_UNAVAILABLE', `serve: ${m.error}`));
      else if (m.ready !== undefined) {
        clearTimeout(timer);
        resolve(m.ready);
      }
    });
    child.once('exit', (code, signal) => fail(new NcclNodeError('ERR_UNAVAILABLE', `serve: server process exited (${code ?? signal}) before listening\n${stderr}`)));
  });
  o.log?.(`serving ${o.checkpoint} on ${spec.host}:${port} with ${o.workers} worker(s)`);
  return {
    url: `http://${spec.host}:${port}`, port, pid: child.pid!,
    close: async () => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 5000);
      await exited;
      clearTimeout(timer);
    },
  };
}
