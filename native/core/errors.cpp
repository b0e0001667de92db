#include "errors.h"

namespace ncclnode {

const char* codeName(Code code) {
  switch (code) {
#define NCCL_NODE_NAME(name, text) \
  case Code::name:                 \
    return text;
    NCCL_NODE_ERROR_CODES(NCCL_NODE_NAME)
#undef NCCL_NODE_NAME
  }
  return "ERR_BACKEND";
}

Code codeFromName(const std::string& name) {
  for (int c = 0; c < kNumCodes; ++c) {
    if (name == codeName(static_cast<Code>(c))) return static_cast<Code>(c);
  }
  return Code::Backend;
}

}  // namespace ncclnode
