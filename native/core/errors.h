// Errors that cross from native code to JavaScript. Every failure carries one of
// the stable codes below; native code throws them as NcclNodeErrors (js_errors.h).
#pragma once

#include <stdexcept>
#include <string>

namespace ncclnode {

// The codes, in the order of src/errors.ts ERROR_CODES (test/contract/lists.test.ts
// compares the two). The numeric value of each travels between ranks (agreement,
// point-to-point headers), so new codes go at the end.
#define NCCL_NODE_ERROR_CODES(X)                                                                 \
  X(InvalidArgument, "ERR_INVALID_ARGUMENT") /* a caller passed something unusable */            \
  X(SizeMismatch, "ERR_SIZE_MISMATCH")       /* buffers disagree, locally or across ranks */     \
  X(Timeout, "ERR_TIMEOUT")                  /* an operation or rendezvous ran past its deadline */ \
  X(CommDestroyed, "ERR_COMM_DESTROYED")     /* use after destroy() */                           \
  X(CommAborted, "ERR_COMM_ABORTED")         /* use after abort() or after a fatal failure */    \
  X(PeerLost, "ERR_PEER_LOST")               /* a peer closed its connection or died */          \
  X(Backend, "ERR_BACKEND")                  /* the backend library reported an error */         \
  X(Store, "ERR_STORE")                      /* the rendezvous store is unreachable or answered badly */ \
  X(Unauthorized, "ERR_UNAUTHORIZED")        /* the store refused the job token */               \
  X(Unavailable, "ERR_UNAVAILABLE")          /* a library, symbol or feature is missing */       \
  X(Nccl, "ERR_NCCL")                        /* NCCL returned an error */                        \
  X(Cuda, "ERR_CUDA")                        /* the CUDA driver returned an error */             \
  X(Nvml, "ERR_NVML")                        /* NVML returned an error */                        \
  X(Io, "ERR_IO")                            /* a file operation failed */                       \
  X(Checksum, "ERR_CHECKSUM")                /* data read back does not match its checksum */    \
  X(Launch, "ERR_LAUNCH")                    /* the gang launcher could not start or keep ranks */

enum class Code {
#define NCCL_NODE_ENUM(name, text) name,
  NCCL_NODE_ERROR_CODES(NCCL_NODE_ENUM)
#undef NCCL_NODE_ENUM
};

constexpr int kNumCodes = 0
#define NCCL_NODE_COUNT(name, text) +1
    NCCL_NODE_ERROR_CODES(NCCL_NODE_COUNT)
#undef NCCL_NODE_COUNT
    ;

const char* codeName(Code code);
// The inverse of codeName; Code::Backend for a name it does not know.
Code codeFromName(const std::string& name);
// A code as it came over the wire; Code::Backend for a number it does not know.
inline Code codeFromNumber(int n) { return n >= 0 && n < kNumCodes ? static_cast<Code>(n) : Code::Backend; }

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
