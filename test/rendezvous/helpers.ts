// Shared helpers for the rendezvous tests.
import net from 'node:net';

import { FrameParser, MAX_BODY_BYTES } from '../../src/rendezvous/protocol.js';

export { freePort } from '../helpers/ranks.js';

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/**
 * Sends raw bytes to the server and collects every reply body until the server
 * closes the connection (or `timeoutMs` passes, which fails the test).
 */
export async function rawExchange(port: number, frames: Buffer[], timeoutMs = 3000): Promise<Buffer[]> {
  const socket = net.connect({ host: '127.0.0.1', port });
  const replies: Buffer[] = [];
  const parser = new FrameParser(MAX_BODY_BYTES);
  socket.on('data', (chunk: Buffer) => parser.push(chunk, (b) => replies.push(Buffer.from(b))));
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`server did not close the connection within ${timeoutMs} ms`));
    }, timeoutMs);
    socket.on('error', () => {}); // a reset after the server closes is fine
    socket.on('close', () => {
      clearTimeout(timer);
      resolve();
    });
    socket.on('connect', () => {
      for (const f of frames) socket.write(f);
    });
  });
  return replies;
}
