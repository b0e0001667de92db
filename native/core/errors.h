// Errors that cross from native code to JavaScript. Every failure carries one of
// the stable codes below; src/errors.ts turns it into an NcclNodeError.
#pragma once

#include <stdexcept>
#include <string>

namespace ncclnode {

enum class Code {
  InvalidArgument,  // ERR_INVALID_ARGUMENT: a caller passed something unusable
  SizeMismatch,     // ERR_SIZE_MISMATCH: buffers disagree, locally or across ranks
  Timeout,          // ERR_TIMEOUT: an operation or rendezvous ran past its deadline
  CommDestroyed,    // ERR_COMM_DESTROYED: use after destroy()
  CommAborted,      // ERR_COMM_ABORTED: use after abort() or after a fatal failure
  PeerLost,         // ERR_PEER_LOST: a peer closed its connection or died
  Backend,          // ERR_BACKEND: the backend library reported an error
  Store,            // ERR_STORE: the rendezvous store is unreachable or answered badly
  Unauthorized,     // ERR_UNAUTHORIZED: the store refused the job token
  Unavailable,      // ERR_UNAVAILABLE: a library, symbol or feature is missing
  Nccl,             // ERR_NCCL: NCCL returned an error
  Cuda,             // ERR_CUDA: the CUDA driver returned an error
  Nvml,             // ERR_NVML: NVML returned an error
  Io,               // ERR_IO: a file operation failed
};

const char* codeName(Code code);
// The inverse of codeName; Code::Backend for a name it does not know.
Code codeFromName(const std::string& name);

// The one exception type native code throws. The message names the call, the rank
// and, where it applies, what was expected against what was received.
class Error : public std::runtime_error {
 public:
  Error(Code code, const std::string& message) : std::runtime_error(message), code_(code) {}
  Code code() const { return code_; }

 private:
  Code code_;
};

}  // namespace ncclnode
