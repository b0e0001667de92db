// A blocking collective whose arguments are checked once and kept: the persistent
// form of submitSync() (MPI 4's MPI_Allreduce_init / MPI_Start). Each run() is the
// same call again, on the same memory, with nothing to convert or allocate; for the
// small exchanges (a loss, a norm, a stop flag) made every step, where checking and
// building the call cost more than the shared-memory round itself.
#pragma once

#include <napi.h>

#include <memory>

#include "engine.h"

namespace ncclnode {

class CommWrap;

// The JS object of a prepared call: { run(), start(), free() } (src/native/contract.ts,
// NativePreparedCall). p is built and checked by CommWrap::PrepareSync, its views
// holding their memory; `send` and `recv` are the caller's arrays as passed (watched
// for a detach at each run; undefined for none); `stamps` (two doubles, held)
// receives each run's entry and exit times. The call keeps `commObject` alive.
//
// run(): the call, blocking, in the communicator's sequence; returns undefined or
// throws its failure. A refusal (freed, or its memory detached since) tells the other
// ranks as submitSync's does. Either way the stamps hold when it was entered and
// left, in milliseconds of the monotonic clock (CLOCK_MONOTONIC, as process.hrtime()):
// two reads of it from JavaScript (performance.now()) cost about as much as the rest
// of a small call's JavaScript. start(): the same call not blocking (MPI_Start): undefined
// when it completed before returning (both stamps written), else a promise of its outcome
// (the entry stamp only). free(): lets the memory go; run() and start() are refused after it.
//
// run and free are plain functions bound to the call, not methods of a wrapped
// object: unwrapping (a private-symbol lookup) was a fifth of a run's native cost.
Napi::Object newPreparedCall(Napi::Env env, CommWrap* comm, const Napi::Object& commObject,
                             std::unique_ptr<Pending> p, const Napi::Value& send, const Napi::Value& recv,
                             BufferView stamps);

}  // namespace ncclnode
