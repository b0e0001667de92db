#include "errors.h"

namespace ncclnode {

const char* codeName(Code code) {
  switch (code) {
    case Code::InvalidArgument: return "ERR_INVALID_ARGUMENT";
    case Code::SizeMismatch: return "ERR_SIZE_MISMATCH";
    case Code::Timeout: return "ERR_TIMEOUT";
    case Code::CommDestroyed: return "ERR_COMM_DESTROYED";
    case Code::CommAborted: return "ERR_COMM_ABORTED";
    case Code::PeerLost: return "ERR_PEER_LOST";
    case Code::Backend: return "ERR_BACKEND";
    case Code::Store: return "ERR_STORE";
    case Code::Unauthorized: return "ERR_UNAUTHORIZED";
    case Code::Unavailable: return "ERR_UNAVAILABLE";
    case Code::Nccl: return "ERR_NCCL";
    case Code::Cuda: return "ERR_CUDA";
    case Code::Nvml: return "ERR_NVML";
    case Code::Io: return "ERR_IO";
  }
  return "ERR_BACKEND";
}

Code codeFromName(const std::string& name) {
  for (int c = 0; c <= static_cast<int>(Code::Io); ++c) {
    if (name == codeName(static_cast<Code>(c))) return static_cast<Code>(c);
  }
  return Code::Backend;
}

}  // namespace ncclnode
