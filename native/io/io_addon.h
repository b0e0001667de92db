// Registers the checkpoint I/O surface (src/native/contract.ts types it):
// ioWriteFile, ioReadFile, ioFsyncDir, crc32c, crc32cHardware.
#pragma once

#include <napi.h>

namespace ncclnode {

void registerIo(Napi::Env env, Napi::Object exports);

}  // namespace ncclnode
