/** The GPU half of the addon's native surface; defined in native/contract.ts, re-exported for older imports. */
export type {
  GpuBinding,
  GpuInfo,
  NativeDeviceBuffer,
  NativeEvent,
  NativeNcclControl,
  NativeStream,
  NcclOptions,
  RegistrationHandle,
  WindowHandle,
} from '../native/contract.js';
