/**
 * DeviceMesh: the world split into named process groups. Dimensions are laid
 * out innermost first as tp, dp, replicate, pp (Megatron's order): tensor
 * parallel ranks are consecutive, so with ranks numbered node by node (as
 * launchers do) a tp group stays inside one node on the fast links, while
 * dp, replicate and pp groups cross nodes and carry less traffic per step.
 */
import type { Communicator } from '../comm/communicator.js';
import { NcclNodeError } from '../errors.js';
import { meshSchema, parse, type MeshOptions } from './runtime-options.js';

export const MESH_DIMS = ['tp', 'dp', 'replicate', 'pp'] as const; // innermost first
export type MeshDim = (typeof MESH_DIMS)[number];

/** Coordinates of `rank` in a mesh of the given sizes (pure; used by tests and the constructor). */
export function meshCoords(rank: number, sizes: Record<MeshDim, number>): Record<MeshDim, number> {
  const out = {} as Record<MeshDim, number>;
  let r = rank;
  for (const d of MESH_DIMS) {
    out[d] = r % sizes[d];
    r = Math.floor(r / sizes[d]);
  }
  return out;
}

/** The ranks of `rank`'s group along `dim`, in group-rank order. */
export function meshGroup(rank: number, sizes: Record<MeshDim, number>, dim: MeshDim): number[] {
  const stride = MESH_DIMS.slice(0, MESH_DIMS.indexOf(dim)).reduce((a, d) => a * sizes[d], 1);
  const base = rank - meshCoords(rank, sizes)[dim] * stride;
  return Array.from({ length: sizes[dim] }, (_, i) => base + i * stride);
}

export class DeviceMesh {
  readonly #groups = new Map<string, Communicator>();

  private constructor(readonly world: Communicator, readonly sizes: Record<MeshDim, number>, readonly coords: Record<MeshDim, number>) {}

  /**
   * Collective over `world`: every rank must call it with the same sizes.
   * dims left out are 1; their product must equal the world size.
   */
  static async create(world: Communicator, dims: MeshOptions): Promise<DeviceMesh> {
    const sizes = parse(meshSchema, dims, 'DeviceMesh.create') as Record<MeshDim, number>;
    const product = MESH_DIMS.reduce((a, d) => a * sizes[d], 1);
    if (product !== world.size) {
      throw new NcclNodeError(
        'ERR_INVALID_ARGUMENT',
        `DeviceMesh.create: pp ${sizes.pp} x replicate ${sizes.replicate} x dp ${sizes.dp} x tp ${sizes.tp} = ${product}, but the world has ${world.size} ranks`,
      );
    }
    if (world.localSize % sizes.tp !== 0) {
      throw new NcclNodeError(
        'ERR_INVALID_ARGUMENT',
        `DeviceMesh.create: tp ${sizes.tp} does not divide the ${world.localSize} ranks per node, so a tensor-parallel group would span nodes`,
      );
    }
    const mesh = new DeviceMesh(world, sizes, meshCoords(world.rank, sizes));
    // Splits are collectives on the world: same dims, same order on every rank.
    for (const d of MESH_DIMS) await mesh.#split(d, [d]);
    return mesh;
  }

  /** A communicator over several dims at once (e.g. ['replicate', 'dp'] for all data-parallel ranks). Collective. */
  async flatten(dims: MeshDim[], name: string): Promise<Communicator> {
    if (this.#groups.has(name)) {
      throw new NcclNodeError('ERR_INVALID_ARGUMENT', `DeviceMesh.flatten: a group named "${name}" already exists`);
    }
    return this.#split(name, dims);
  }

  async #split(name: string, dims: MeshDim[]): Promise<Communicator> {
    // color: the coordinates along every dim NOT in the group; key: position within it.
    let color = 0;
    let key = 0;
    for (const d of [...MESH_DIMS].reverse()) {
      if (dims.includes(d)) key = key * this.sizes[d] + this.coords[d];
      else color = color * this.sizes[d] + this.coords[d];
    }
    const comm = await this.world.split({ color, key });
    this.#groups.set(name, comm!);
    return comm!;
  }

  /** The communicator of this rank's group along a dim (or a flattened name). */
  get(name: MeshDim | string): Communicator {
    const c = this.#groups.get(name);
    if (!c) throw new NcclNodeError('ERR_INVALID_ARGUMENT', `DeviceMesh.get: no dimension or flattened group "${name}" (have ${[...this.#groups.keys()].join(', ')})`);
    return c;
  }

  size(dim: MeshDim): number {
    return this.sizes[dim];
  }

  coord(dim: MeshDim): number {
    return this.coords[dim];
  }
}
