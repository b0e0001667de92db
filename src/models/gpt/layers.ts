/**
 * GPT's layers that TinyLM does not have, forward and backward on row-major
 * Float32Arrays: layer norm, GELU (tanh form, as GPT-2) and multi-head causal
 * self-attention. Backward functions accumulate into parameter gradients and
 * overwrite (or add into, where said) input gradients. Sums run in float64 where
 * a row is reduced, so the result does not depend on the row's length as much.
 */

export interface NormSaved {
  /** (x - mean) * rstd per row. */
  xhat: Float32Array;
  rstd: Float32Array;
}

const EPS = 1e-5;

/** y = xhat * g + b per row of D; returns what the backward needs. */
export function layerNorm(x: Float32Array, g: Float32Array, b: Float32Array, y: Float32Array, n: number, D: number): NormSaved {
  const xhat = new Float32Array(n * D);
  const rstd = new Float32Array(n);
  for (let r = 0; r < n; r++) {
    const o = r * D;
    let mean = 0;
    for (let d = 0; d < D; d++) mean += x[o + d]!;
    mean /= D;
    let v = 0;
    for (let d = 0; d < D; d++) v += (x[o + d]! - mean) ** 2;
    const s = 1 / Math.sqrt(v / D + EPS);
    rstd[r] = s;
    for (let d = 0; d < D; d++) {
      const xh = (x[o + d]! - mean) * s;
      xhat[o + d] = xh;
      y[o + d] = xh * g[d]! + b[d]!;
    }
  }
  return { xhat, rstd };
}

/** dx += LN backward of dy; dg, db accumulate. */
export function layerNormBackward(dy: Float32Array, s: NormSaved, g: Float32Array, dx: Float32Array, dg: Float32Array, db: Float32Array, n: number, D: number): void {
  for (let r = 0; r < n; r++) {
    const o = r * D;
    let m1 = 0, m2 = 0;
    for (let d = 0; d < D; d++) {
      const dxh = dy[o + d]! * g[d]!;
      m1 += dxh;
      m2 += dxh * s.xhat[o + d]!;
      dg[d] = dg[d]! + dy[o + d]! * s.xhat[o + d]!;
      db[d] = db[d]! + dy[o + d]!;
    }
    m1 /= D;
    m2 /= D;
    const rs = s.rstd[r]!;
    for (let d = 0; d < D; d++) dx[o + d] = dx[o + d]! + rs * (dy[o + d]! * g[d]! - m1 - s.xhat[o + d]! * m2);
  }
}

const GELU_C = Math.sqrt(2 / Math.PI);

/** GELU, tanh approximation, in place. */
export function gelu(x: Float32Array, out: Float32Array): void {
  for (let i = 0; i < x.length; i++) {
    const v = x[i]!;
    out[i] = 0.5 * v * (1 + Math.tanh(GELU_C * (v + 0.044715 * v * v * v)));
  }
}

/** dx = dy * gelu'(x), overwriting dy. */
export function geluBackward(x: Float32Array, dy: Float32Array): void {
  for (let i = 0; i < x.length; i++) {
    const v = x[i]!;
    const u = GELU_C * (v + 0.044715 * v * v * v);
    const t = Math.tanh(u);
    const du = GELU_C * (1 + 3 * 0.044715 * v * v);
    dy[i] = dy[i]! * (0.5 * (1 + t) + 0.5 * v * (1 - t * t) * du);
  }
}

export interface AttentionShape {
  batch: number;
  T: number;
  D: number;
  heads: number;
}

/**
 * Causal attention over qkv rows [q | k | v] (N x 3D, heads split along D):
 * att[i] = Σ_{j ≤ i} softmax_j(q_i·k_j / √hd) v_j per head. Returns the
 * probabilities (batch x heads x T x T, zero above the diagonal) for the backward.
 */
export function attention(qkv: Float32Array, att: Float32Array, s: AttentionShape): Float32Array {
  const { batch, T, D, heads } = s;
  const hd = D / heads;
  const scale = 1 / Math.sqrt(hd);
  const probs = new Float32Array(batch * heads * T * T);
  const row = new Float64Array(T);
  for (let b = 0; b < batch; b++) {
    for (let h = 0; h < heads; h++) {
      const P = (b * heads + h) * T * T;
      for (let i = 0; i < T; i++) {
        const qo = (b * T + i) * 3 * D + h * hd;
        let max = -Infinity;
        for (let j = 0; j <= i; j++) {
          const ko = (b * T + j) * 3 * D + D + h * hd;
          let dot = 0;
          for (let d = 0; d < hd; d++) dot += qkv[qo + d]! * qkv[ko + d]!;
          row[j] = dot * scale;
          if (row[j]! > max) max = row[j]!;
        }
        let sum = 0;
        for (let j = 0; j <= i; j++) {
          row[j] = Math.exp(row[j]! - max);
          sum += row[j]!;
        }
        const ao = (b * T + i) * D + h * hd;
        for (let d = 0; d < hd; d++) att[ao + d] = 0;
        for (let j = 0; j <= i; j++) {
          const p = row[j]! / sum;
          probs[P + i * T + j] = p;
          const vo = (b * T + j) * 3 * D + 2 * D + h * hd;
          for (let d = 0; d < hd; d++) att[ao + d] = att[ao + d]! + p * qkv[vo + d]!;
        }
      }
    }
  }
  return probs;
}

/** dqkv (overwritten) from datt, given the forward's qkv and probabilities. */
export function attentionBackward(qkv: Float32Array, probs: Float32Array, datt: Float32Array, dqkv: Float32Array, s: AttentionShape): void {
  const { batch, T, D, heads } = s;
  const hd = D / heads;
  const scale = 1 / Math.sqrt(hd);
  dqkv.fill(0);
  const dp = new Float64Array(T);
  for (let b = 0; b < batch; b++) {
    for (let h = 0; h < heads; h++) {
      const P = (b * heads + h) * T * T;
      for (let i = 0; i < T; i++) {
        const ao = (b * T + i) * D + h * hd;
        // dp_ij = datt_i · v_j ; dv_j += p_ij datt_i
        let dot = 0;
        for (let j = 0; j <= i; j++) {
          const vo = (b * T + j) * 3 * D + 2 * D + h * hd;
          const p = probs[P + i * T + j]!;
          let acc = 0;
          for (let d = 0; d < hd; d++) {
            acc += datt[ao + d]! * qkv[vo + d]!;
            dqkv[vo + d] = dqkv[vo + d]! + p * datt[ao + d]!;
          }
          dp[j] = acc;
          dot += p * acc;
        }
        // ds_ij = p_ij (dp_ij - Σ_k p_ik dp_ik); dq_i += ds_ij k_j scale; dk_j += ds_ij q_i scale
        const qo = (b * T + i) * 3 * D + h * hd;
        for (let j = 0; j <= i; j++) {
          const ds = probs[P + i * T + j]! * (dp[j]! - dot) * scale;
          const ko = (b * T + j) * 3 * D + D + h * hd;
          for (let d = 0; d < hd; d++) {
            dqkv[qo + d] = dqkv[qo + d]! + ds * qkv[ko + d]!;
            dqkv[ko + d] = dqkv[ko + d]! + ds * qkv[qo + d]!;
          }
        }
      }
    }
  }
}
