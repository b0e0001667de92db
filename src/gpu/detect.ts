/**
 * Finds the GPU libraries by file, without loading them (as node-llama-cpp's
 * detectAvailableComputeLayers does), so backend 'auto' can decide cheaply and a
 * missing library is reported with the places that were searched.
 */
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';

export type GpuLibrary = 'cuda' | 'nccl' | 'nvml';

const SONAME: Record<GpuLibrary, string> = { cuda: 'libcuda.so.1', nccl: 'libnccl.so.2', nvml: 'libnvidia-ml.so.1' };
/** Environment variables that name the file to load instead (part of the spec). */
export const LIBRARY_ENV: Record<GpuLibrary, string> = {
  cuda: 'NCCL_NODE_LIBCUDA',
  nccl: 'NCCL_NODE_LIBNCCL',
  nvml: 'NCCL_NODE_LIBNVML',
};

function searchDirs(env: NodeJS.ProcessEnv): string[] {
  const dirs = (env.LD_LIBRARY_PATH ?? '').split(':').filter(Boolean);
  if (env.NCCL_DIR) dirs.push(join(env.NCCL_DIR, 'lib'), env.NCCL_DIR);
  if (env.CUDA_PATH) dirs.push(join(env.CUDA_PATH, 'lib64'));
  dirs.push('/usr/lib/x86_64-linux-gnu', '/usr/lib/aarch64-linux-gnu', '/usr/lib64', '/usr/lib',
    '/usr/local/cuda/lib64', '/usr/local/cuda/targets/x86_64-linux/lib', '/usr/local/cuda/targets/sbsa-linux/lib',
    '/usr/lib/wsl/lib');
  return dirs;
}

export interface LibraryProbe {
  library: GpuLibrary;
  /** The file that would be loaded, or undefined when none was found. */
  path: string | undefined;
  /** Where we looked, for error messages. */
  searched: string[];
}

export function probeLibrary(library: GpuLibrary, env: NodeJS.ProcessEnv = process.env): LibraryProbe {
  const override = env[LIBRARY_ENV[library]];
  if (override) return { library, path: existsSync(override) ? override : undefined, searched: [override] };
  const dirs = searchDirs(env);
  for (const d of dirs) {
    const p = join(d, SONAME[library]);
    if (existsSync(p)) return { library, path: p, searched: dirs };
  }
  return { library, path: undefined, searched: dirs };
}

/** True when /dev has NVIDIA device nodes (a GPU and its driver are present). */
function hasDeviceNodes(): boolean {
  try {
    return readdirSync('/dev').some((f) => /^nvidia\d+$/.test(f));
  } catch {
    return false;
  }
}

/**
 * What backend 'auto' should pick: NCCL when libcuda and libnccl are found and a
 * GPU is present (or the libraries were named explicitly, as CI does with the
 * stand-ins), else Gloo.
 */
export function detectBackend(env: NodeJS.ProcessEnv = process.env): { backend: 'nccl' | 'gloo'; reason: string } {
  const cuda = probeLibrary('cuda', env);
  const nccl = probeLibrary('nccl', env);
  if (!cuda.path) return { backend: 'gloo', reason: `${SONAME.cuda} not found (set ${LIBRARY_ENV.cuda})` };
  if (!nccl.path) return { backend: 'gloo', reason: `${SONAME.nccl} not found (set ${LIBRARY_ENV.nccl})` };
  const explicit = Boolean(env[LIBRARY_ENV.cuda]);
  if (!explicit && !hasDeviceNodes()) return { backend: 'gloo', reason: 'no /dev/nvidia* device nodes' };
  return { backend: 'nccl', reason: `found ${cuda.path} and ${nccl.path}` };
}
