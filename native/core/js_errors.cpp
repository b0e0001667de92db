#include "js_errors.h"

namespace ncclnode {

Napi::Error makeError(Napi::Env env, Code code, const std::string& message) {
  Napi::Error err = Napi::Error::New(env, message);
  err.Set("code", Napi::String::New(env, codeName(code)));
  return err;
}

}  // namespace ncclnode
