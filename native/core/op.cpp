#include "op.h"

namespace ncclnode {

const char* opKindName(OpKind k) {
  static const char* names[] = {"allReduce", "broadcast", "reduce", "allGather",
                                "reduceScatter", "allToAll", "gather", "scatter",
                                "send", "recv", "barrier", "split"};
  int i = static_cast<int>(k);
  return i >= 0 && i < kNumOpKinds ? names[i] : "unknown";
}

}  // namespace ncclnode
