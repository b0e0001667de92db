// Reads one GPU-machine run's logs (scripts/gpu/run.sh's $OUT) and prints, per
// collective and size, nccl-node bench's time beside torch.distributed's on the same
// NCCL in the same run (torch_baseline.py), as a markdown table and one JSON line.
// torch's all_reduce and broadcast are in place, so those rows take nccl-node's
// in-place column; the others (all_gather_into_tensor, reduce_scatter_tensor,
// all_to_all_single) are out of place.
//   node scripts/gpu/compare-torch.mjs DIR [--json FILE]
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

const dir = process.argv[2];
if (!dir) throw new Error('usage: compare-torch.mjs DIR [--json FILE]');
const jsonAt = process.argv.indexOf('--json');
const lines = readFileSync(join(dir, 'torch-baseline.jsonl'), 'utf8').trim().split('\n').map((l) => JSON.parse(l));
const torch = new Map(lines.filter((l) => l.coll).map((l) => [`${l.coll}/${l.bytes}`, l.us]));
const inPlace = new Set(['all_reduce', 'broadcast']);
const rows = [];
for (const coll of ['all_reduce', 'all_gather', 'reduce_scatter', 'broadcast', 'alltoall']) {
  const bench = JSON.parse(readFileSync(join(dir, `bench-${coll}.json`), 'utf8'));
  for (const r of bench.results) {
    // nccl-tests rounds all_gather and alltoall sizes down to 16 bytes: 8 B is 0 there.
    const bytes = r.size === 0 ? 8 : r.size;
    const t = torch.get(`${coll}/${bytes}`);
    if (t === undefined || r.size === 0) continue;
    const ours = (inPlace.has(coll) ? r.in_place : r.out_of_place).time;
    rows.push({ coll, bytes, placement: inPlace.has(coll) ? 'in place' : 'out of place', ncclNodeUs: ours, torchUs: t, ratio: ours / t, wrong: r.out_of_place.nwrong + (Number(r.in_place.nwrong) || 0) });
  }
}
const fmtBytes = (b) => (b >= 1 << 20 ? `${b / (1 << 20)} MiB` : b >= 1024 ? `${b / 1024} KiB` : `${b} B`);
console.log('| Collective | Size | nccl-node µs | torch µs | ratio |');
console.log('|---|---|---|---|---|');
for (const r of rows) console.log(`| ${r.coll} (${r.placement}) | ${fmtBytes(r.bytes)} | ${r.ncclNodeUs.toFixed(1)} | ${r.torchUs.toFixed(1)} | ${r.ratio.toFixed(2)} |`);
const ratios = rows.map((r) => r.ratio).sort((a, b) => a - b);
const latency = lines.find((l) => l.awaitedLatencyUs);
const smoke = readFileSync(join(dir, 'smoke.jsonl'), 'utf8').trim().split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l));
const ours = smoke.find((c) => c.check === 'awaited-latency');
const summary = {
  torch: lines[0],
  ratios: { min: ratios[0], median: ratios[Math.floor(ratios.length / 2)], max: ratios.at(-1), slower: rows.filter((r) => r.ratio > 1).length, of: rows.length },
  awaitedLatencyUs: { ncclNode: ours?.median, torch: latency?.median, ratio: ours && latency ? ours.median / latency.median : undefined },
  checks: smoke.map((c) => ({ check: c.check, ok: c.ok })),
};
console.log(`\n${JSON.stringify(summary)}`);
if (jsonAt > 0) writeFileSync(process.argv[jsonAt + 1], JSON.stringify({ ...summary, rows }, null, 2) + '\n');
