#include "js_errors.h"

#include "addon_data.h"

namespace ncclnode {

Napi::Error makeError(Napi::Env env, Code code, const std::string& message) {
  Napi::FunctionReference& ctor = addonData(env).errorCtor;
  if (!ctor.IsEmpty()) {
    // A throwing constructor surfaces as that exception, which is the truer report.
    try {
      Napi::Object err = ctor.New({Napi::String::New(env, codeName(code)), Napi::String::New(env, message)});
      return Napi::Error(env, err);
    } catch (const Napi::Error& e) {
      return e;
    }
  }
  Napi::Error err = Napi::Error::New(env, message);
  err.Set("code", Napi::String::New(env, codeName(code)));
  return err;
}

Napi::Value SetErrorConstructor(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsFunction()) {
    makeError(env, Code::InvalidArgument, "setErrorConstructor: expected a class").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  addonData(env).errorCtor = Napi::Persistent(info[0].As<Napi::Function>());
  return env.Undefined();
}

}  // namespace ncclnode
