/**
 * Scoped tokens: a token that the store accepts in place of the job token, and whose
 * connections see only the keys under a prefix of their own. A launcher gives each
 * attempt of a restarted job its own scope, so the ranks of attempt 2 start from an
 * empty store (Gloo and NCCL keys of attempt 1 stay out of their way) and cannot touch
 * the launchers' rendezvous keys. Anyone holding the job token can mint a scoped token
 * (an HMAC of the scope's name), so launchers on every node agree on it without asking.
 */
import { createHmac } from 'node:crypto';

import { NcclNodeError } from '../errors.js';

const PREFIX = 'nccl-node-scope:';
const NAME = /^[\w.-]{1,64}$/;

/** The key prefix a scope's connections are confined to. */
export function scopeKeyPrefix(name: string): string {
  return `nccl-node/scope/${name}/`;
}

function mac(jobToken: string, name: string): string {
  return createHmac('sha256', jobToken).update(`nccl-node store scope\0${name}`).digest('hex');
}

/** The token for scope `name` of the job whose token is `jobToken`. */
export function scopedToken(jobToken: string, name: string): string {
  if (!NAME.test(name)) {
    throw new NcclNodeError('ERR_INVALID_ARGUMENT', `scope names are 1-64 letters, digits, "_", "." or "-", got ${JSON.stringify(name)}`, { received: name });
  }
  return `${PREFIX}${name}:${mac(jobToken, name)}`;
}

/**
 * The scope a token claims and the token it must equal, or undefined when it does not
 * look scoped. The caller compares `expected` with what was sent in constant time.
 */
export function claimedScope(jobToken: string, token: string): { name: string; expected: string } | undefined {
  if (!token.startsWith(PREFIX)) return undefined;
  const rest = token.slice(PREFIX.length);
  const colon = rest.lastIndexOf(':');
  const name = rest.slice(0, colon);
  if (colon < 1 || !NAME.test(name)) return undefined;
  return { name, expected: scopedToken(jobToken, name) };
}
